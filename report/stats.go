package report

import (
	"fmt"
	"math"

	"evals.si/evaluate"
)

// z95 is the two-sided 95% quantile of the normal distribution: the
// interval is mean ± z95·stderr, the normal approximation Inspect AI and
// most eval reports use. With few trials a Student t interval would be
// wider; the stderr is printed too, so a reader can widen it.
const z95 = 1.96

// Estimate is a mean with its uncertainty. Stderr, Lo and Hi are set only
// when Known: it takes at least two values (and, for a stored summary, one
// written since the standard deviation is recorded).
type Estimate struct {
	Mean   float64 `json:"mean"`
	N      int     `json:"n"`
	Known  bool    `json:"known"`
	Stderr float64 `json:"stderr"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
}

// EstimateOf is the mean of values with its standard error, the sample
// standard deviation (n-1 denominator) over √n, as Inspect AI's stderr.
func EstimateOf(values []float64) Estimate {
	n := len(values)
	if n == 0 {
		return Estimate{}
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	mean := sum / float64(n)
	if n < 2 {
		return Estimate{Mean: mean, N: n}
	}
	// Two passes: exact for the small sums of squared deviations of
	// scores that are all nearly equal.
	var ss float64
	for _, v := range values {
		ss += (v - mean) * (v - mean)
	}
	return EstimateFromSD(mean, math.Sqrt(ss/float64(n-1)), n)
}

// EstimateFromSD is the estimate of a mean of n values with sample
// standard deviation sd.
func EstimateFromSD(mean, sd float64, n int) Estimate {
	e := Estimate{Mean: mean, N: n}
	if n < 2 || math.IsNaN(sd) {
		return e
	}
	e.Known = true
	e.Stderr = sd / math.Sqrt(float64(n))
	e.Lo, e.Hi = mean-z95*e.Stderr, mean+z95*e.Stderr
	return e
}

// ScoreEstimate is a score's mean over trials with its uncertainty; it is
// unknown in a summary stored before the standard deviation was.
//
// When some record ran more than one trial the trials are not independent
// (a record that is hard is hard in every trial), so the standard error is
// that of the per-record means over √records, as Inspect AI reduces each
// sample's epochs before its stderr; taking it over trials would make the
// interval about √trials too narrow.
func ScoreEstimate(m evaluate.ScoreMean) Estimate {
	if m.Records > 0 && m.Records < m.N {
		e := Estimate{Mean: m.Mean}
		if m.RecordSD != nil {
			e = EstimateFromSD(m.Mean, *m.RecordSD, m.Records)
		}
		// N stays the trials scored: the count a person reads beside it.
		e.N = m.N
		return e
	}
	if m.SD == nil {
		return Estimate{Mean: m.Mean, N: m.N}
	}
	return EstimateFromSD(m.Mean, *m.SD, m.N)
}

// PassKEstimate is pass@k (or pass^k) with its uncertainty, analytic over
// records: a record's pass@k is the unbiased estimator from its n trials
// and c passes, the run's value is the mean over records, and its standard
// error is the sample standard deviation of the per-record estimates over
// √records. Records are the independent units here (trials of one record
// are not), which is why the spread is taken over records and not trials;
// it leaves out the within-record sampling noise of each estimate, so with
// few trials per record it is a lower bound. A bootstrap over records
// would give about the same for the run sizes evals have and costs a
// resampling loop per k.
func PassKEstimate(p evaluate.PassK) Estimate {
	if p.SD == nil {
		return Estimate{Mean: p.Value, N: p.Records}
	}
	return EstimateFromSD(p.Value, *p.SD, p.Records)
}

// PlusMinus is the half-width of the 95% interval, "±0.123", or "-" when
// unknown.
func (e Estimate) PlusMinus() string {
	if !e.Known {
		return "-"
	}
	return fmt.Sprintf("±%.3f", z95*e.Stderr)
}

// Interval is the 95% interval, "[0.512, 0.821]", or "-" when unknown.
func (e Estimate) Interval() string {
	if !e.Known {
		return "-"
	}
	return fmt.Sprintf("[%.3f, %.3f]", e.Lo, e.Hi)
}

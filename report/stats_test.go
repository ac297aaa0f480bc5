package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/spec"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-4 }

// Hand-computed: for 1,0,1 the mean is 2/3, the squared deviations sum to
// 2/3, the sample variance is 1/3, sd 0.57735 and stderr sd/√3 = 0.33333;
// the interval is 2/3 ± 1.96·0.33333 = ±0.65333. For 2,4,4,4,5,5,7,9 the
// mean is 5, the squares sum to 32, the variance 32/7, sd 2.13809, stderr
// 2.13809/√8 = 0.75593.
func TestEstimateOf(t *testing.T) {
	for _, tc := range []struct {
		name             string
		values           []float64
		mean, se, lo, hi float64
		known            bool
	}{
		{"pass/fail", []float64{1, 0, 1}, 0.66667, 0.33333, 0.01333, 1.32, true},
		{"textbook", []float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, 0.75593, 3.51838, 6.48162, true},
		{"all equal", []float64{1, 1, 1, 1}, 1, 0, 1, 1, true},
		{"one value", []float64{0.5}, 0.5, 0, 0, 0, false},
		{"none", nil, 0, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := EstimateOf(tc.values)
			if e.Known != tc.known || !near(e.Mean, tc.mean) || !near(e.Stderr, tc.se) || !near(e.Lo, tc.lo) || !near(e.Hi, tc.hi) || e.N != len(tc.values) {
				t.Errorf("EstimateOf(%v) = %+v, want mean %.5f se %.5f [%.5f, %.5f] known %v", tc.values, e, tc.mean, tc.se, tc.lo, tc.hi, tc.known)
			}
		})
	}
	if got := EstimateOf([]float64{1, 0, 1}).PlusMinus(); got != "±0.653" {
		t.Errorf("PlusMinus = %q, want ±0.653", got)
	}
	if got := EstimateOf([]float64{1}).PlusMinus(); got != "-" {
		t.Errorf("PlusMinus of one value = %q, want -", got)
	}
}

// With several trials per record the stderr is over records, the
// independent units, for score means and pass@k alike: record a passes 3 of
// 3 trials (mean 1, pass@1 = 1), record b 0 of 3 (mean 0), so the mean is
// 0.5 with sd √0.5 over two records and stderr 0.5, not the 0.224 that
// six "independent" trials would give; pass@3 is 1 and 0, the same. With
// one trial per record it is over trials, as EstimateOf.
func TestSummaryEstimates(t *testing.T) {
	ts := func(rec string, trial int, v float64) evaluate.TrialResult {
		return evaluate.TrialResult{RecordID: rec, Trial: trial, Evaluations: []evaluate.EvaluatorResult{
			{Evaluator: evaluate.TaskSuccess, Scores: []evaluate.Score{{Name: "task-success", Value: v}}}}}
	}
	var trials []evaluate.TrialResult
	for i := 1; i <= 3; i++ {
		trials = append(trials, ts("a", i, 1), ts("b", i, 0))
	}
	agg := evaluate.Aggregate([]spec.Evaluator{{Name: evaluate.TaskSuccess}}, trials)
	mean := ScoreEstimate(agg.Means[0])
	if !mean.Known || !near(mean.Stderr, 0.5) || mean.N != 6 {
		t.Errorf("task-success estimate %+v, want stderr 0.5 over 2 records (sd √0.5 / √2), 6 trials", mean)
	}
	var single []evaluate.TrialResult
	for i, v := range []float64{1, 0, 1, 0, 1, 0} {
		single = append(single, ts(fmt.Sprintf("r%d", i), 1, v))
	}
	one := ScoreEstimate(evaluate.Aggregate([]spec.Evaluator{{Name: evaluate.TaskSuccess}}, single).Means[0])
	if want := EstimateOf([]float64{1, 0, 1, 0, 1, 0}); !one.Known || !near(one.Stderr, want.Stderr) || !near(one.Stderr, 0.22361) {
		t.Errorf("one trial per record: estimate %+v, want stderr %.5f (sd 0.54772 / √6)", one, want.Stderr)
	}
	if len(agg.PassAtK) != 3 {
		t.Fatalf("pass@k = %+v", agg.PassAtK)
	}
	for _, p := range []evaluate.PassK{agg.PassAtK[0], agg.PassAtK[2], agg.PassHatK[2]} {
		if e := PassKEstimate(p); !e.Known || !near(e.Mean, 0.5) || !near(e.Stderr, 0.5) || e.N != 2 {
			t.Errorf("pass k=%d estimate %+v, want 0.5 ± stderr 0.5 over 2 records", p.K, e)
		}
	}
	// A summary stored before sd was recorded has no interval.
	if e := ScoreEstimate(evaluate.ScoreMean{Name: "x", Mean: 0.5, N: 10}); e.Known {
		t.Errorf("estimate without sd is known: %+v", e)
	}

	s := &engine.Summary{RunID: "r", Status: "completed", Records: 2, Trials: 3, Aggregate: agg, Scores: agg.Scores()}
	var b bytes.Buffer
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	table := strings.Join(strings.Fields(b.String()), " ")
	for _, w := range []string{"MEAN ±95% SCORED", "task-success task-success 0.500 ±0.980 6 0", "pass@k pass@1 0.500 ±0.980 2", "pass^k pass^3 0.500 ±0.980 2"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var got JSONSummary
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !near(got.Stderr["task-success"], 0.5) || !near(got.Stderr["pass@1"], 0.5) || got.Scores["task-success"] != 0.5 {
		t.Errorf("--json stderr = %v, scores = %v", got.Stderr, got.Scores)
	}
}

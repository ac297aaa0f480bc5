package evaluate

import (
	"fmt"
	"math"

	"evals.si/spec"
)

// EvaluatorResult is one evaluator's outcome on one trial.
type EvaluatorResult struct {
	// Evaluator is the evaluator's name as in the spec.
	Evaluator string  `json:"evaluator"`
	Scores    []Score `json:"scores,omitempty"`
	// Err is set when the evaluator could not score the trial.
	Err string `json:"error,omitempty"`
}

// TrialResult is a finished trial as Aggregate sees it.
type TrialResult struct {
	RecordID string `json:"record_id"`
	Trial    int    `json:"trial"`
	// Err is set when the trial itself failed (an infrastructure error):
	// nothing was scored.
	Err string `json:"error,omitempty"`
	// Group is the record's category (metadata.category), by which the
	// summary also breaks scores down; empty for none.
	Group string `json:"group,omitempty"`
	// Evaluations holds one result per configured evaluator, in spec order.
	Evaluations []EvaluatorResult `json:"evaluations,omitempty"`
}

// ScoreMean is the mean of one score over the trials that reported it.
type ScoreMean struct {
	Name string  `json:"name"`
	Mean float64 `json:"mean"`
	// N is how many trials reported the score.
	N int `json:"n"`
	// SD is the sample standard deviation of the score over those trials
	// (n-1 denominator); absent when fewer than two reported it. The
	// report derives the mean's standard error and interval from it.
	SD *float64 `json:"sd,omitempty"`
	// Records is how many records the N trials belong to, and RecordSD the
	// sample standard deviation of the per-record means, when some record
	// ran more than one trial: trials of one record are not independent,
	// so the mean's standard error is taken over records then (as Inspect
	// AI reduces a sample's epochs before its stderr).
	Records  int      `json:"records,omitempty"`
	RecordSD *float64 `json:"record_sd,omitempty"`
}

// EvaluatorSummary is one configured evaluator's part of a summary.
type EvaluatorSummary struct {
	Name string `json:"name"`
	// Errored counts the trials it could not score: its own errors and
	// trials that failed before evaluation.
	Errored int         `json:"errored"`
	Scores  []ScoreMean `json:"scores"`
}

// PassK is pass@k or pass^k for one k, averaged over records.
type PassK struct {
	K     int     `json:"k"`
	Value float64 `json:"value"`
	// Records is how many records had at least k decidable trials and so
	// entered the average.
	Records int `json:"records"`
	// SD is the sample standard deviation over those records of each
	// record's pass@k estimate; absent for fewer than two records.
	SD *float64 `json:"sd,omitempty"`
}

// Summary is a run's aggregate, as the report prints it.
type Summary struct {
	// Records is the number of distinct records; Trials the most trials any
	// record had; TrialsRun the number of trials in all.
	Records   int `json:"records"`
	Trials    int `json:"trials"`
	TrialsRun int `json:"trials_run"`
	// Errored counts trials that failed or that some evaluator could not score.
	Errored    int                `json:"errored"`
	Evaluators []EvaluatorSummary `json:"evaluators"`
	// Means holds every score's mean, in evaluator order; a score name two
	// evaluators share is averaged over both.
	Means []ScoreMean `json:"means"`
	// PassSignal names the evaluators whose scores decide whether a trial
	// passed; empty when none of the configured evaluators gives one.
	PassSignal []string `json:"pass_signal,omitempty"`
	// PassAtK and PassHatK hold k = 1..Trials when Trials > 1 and there is a
	// pass signal; a k no record had enough decidable trials for is left out.
	PassAtK  []PassK `json:"pass_at_k,omitempty"`
	PassHatK []PassK `json:"pass_hat_k,omitempty"`
	// Groups breaks the means down by record category (a benchmark's
	// categories: BFCL's simple_python, multi_turn_base, ...), in the order
	// categories first appear; empty when no record has one.
	Groups []GroupSummary `json:"groups,omitempty"`
}

// GroupSummary is the part of a summary of one record category.
type GroupSummary struct {
	Name string `json:"name"`
	// Trials counts the category's trials, Errored those that failed or
	// that some evaluator could not score.
	Trials  int         `json:"trials"`
	Errored int         `json:"errored"`
	Means   []ScoreMean `json:"means"`
}

// Scores returns the flat map of the `--json` report: each score's mean,
// plus "pass@K" and "pass^K".
func (s Summary) Scores() map[string]float64 {
	m := make(map[string]float64, len(s.Means)+len(s.PassAtK)+len(s.PassHatK))
	for _, sm := range s.Means {
		m[sm.Name] = sm.Mean
	}
	for _, p := range s.PassAtK {
		m[fmt.Sprintf("pass@%d", p.K)] = p.Value
	}
	for _, p := range s.PassHatK {
		m[fmt.Sprintf("pass^%d", p.K)] = p.Value
	}
	return m
}

// passRule decides whether one evaluator's scores make a trial pass.
type passRule struct {
	index int // position in the configured evaluators
	name  string
	pass  func(scores []Score) (pass, ok bool)
}

func scoreValue(scores []Score, name string) (float64, bool) {
	for _, s := range scores {
		if s.Name == name {
			return s.Value, true
		}
	}
	return 0, false
}

// passRules chooses the pass signal. When task-success is configured it
// alone decides (the checker's verdict is the ground truth of an agent
// run). Otherwise a trial passes when every pass evaluator passes: the 1/0
// output checks (exact-match, includes, regex, json-valid, trajectory-match)
// at 1, and llm-judge and goal-completion at or above their `threshold`
// when one is set. Continuous scores without a threshold (code-quality,
// efficiency, tool-call F1, …) are not pass signals.
func passRules(cfgs []spec.Evaluator) []passRule {
	binary := func(score string) func([]Score) (bool, bool) {
		return func(s []Score) (bool, bool) {
			v, ok := scoreValue(s, score)
			return v == 1, ok
		}
	}
	for i, c := range cfgs {
		if c.Name == TaskSuccess {
			return []passRule{{index: i, name: c.Name, pass: binary("task-success")}}
		}
	}
	var rules []passRule
	for i, c := range cfgs {
		switch c.Name {
		case ExactMatch, Includes, Regex, JSONValid, TrajectoryMatch:
			rules = append(rules, passRule{index: i, name: c.Name, pass: binary(c.Name)})
		case LLMJudge, GoalCompletion:
			if c.Threshold == nil {
				continue
			}
			th, score := *c.Threshold, c.Name
			rules = append(rules, passRule{index: i, name: c.Name, pass: func(s []Score) (bool, bool) {
				v, ok := scoreValue(s, score)
				return v >= th, ok
			}})
		}
	}
	return rules
}

// resultFor finds the result of configured evaluator i in a trial: by
// position when the engine kept spec order (as it should), else the first
// result of that name.
func resultFor(t TrialResult, i int, name string) (EvaluatorResult, bool) {
	if i < len(t.Evaluations) && t.Evaluations[i].Evaluator == name {
		return t.Evaluations[i], true
	}
	for _, r := range t.Evaluations {
		if r.Evaluator == name {
			return r, true
		}
	}
	return EvaluatorResult{}, false
}

// meanAcc accumulates means in first-seen order, and per score each
// record's sum and count (for the standard error over records).
type meanAcc struct {
	order []string
	sum   map[string]float64
	// wmean and m2 are Welford's running mean and sum of squared
	// deviations: a sum of squares cancels catastrophically for scores of
	// large magnitude (latencies, token counts).
	wmean map[string]float64
	m2    map[string]float64
	n     map[string]int
	recs  map[string]map[string]*recSum
	// recOrder keeps each score's records in first-seen order, so the
	// floating-point sums are the same on every run.
	recOrder map[string][]string
}

type recSum struct {
	sum float64
	n   int
}

func newMeanAcc() *meanAcc {
	return &meanAcc{sum: map[string]float64{}, wmean: map[string]float64{}, m2: map[string]float64{}, n: map[string]int{},
		recs: map[string]map[string]*recSum{}, recOrder: map[string][]string{}}
}

func (a *meanAcc) add(name, record string, v float64) {
	if _, seen := a.n[name]; !seen {
		a.order = append(a.order, name)
		a.recs[name] = map[string]*recSum{}
	}
	a.sum[name] += v
	a.n[name]++
	d := v - a.wmean[name]
	a.wmean[name] += d / float64(a.n[name])
	a.m2[name] += d * (v - a.wmean[name])
	r := a.recs[name][record]
	if r == nil {
		r = &recSum{}
		a.recs[name][record] = r
		a.recOrder[name] = append(a.recOrder[name], record)
	}
	r.sum += v
	r.n++
}

func (a *meanAcc) means() []ScoreMean {
	out := make([]ScoreMean, 0, len(a.order))
	for _, name := range a.order {
		m := ScoreMean{Name: name, Mean: a.sum[name] / float64(a.n[name]), N: a.n[name], SD: sdOf(a.m2[name], a.n[name])}
		if recs := a.recOrder[name]; len(recs) < m.N {
			means := make([]float64, len(recs))
			for i, id := range recs {
				r := a.recs[name][id]
				means[i] = r.sum / float64(r.n)
			}
			m.Records, m.RecordSD = len(recs), sampleSD(means)
		}
		out = append(out, m)
	}
	return out
}

// sdOf is the sample standard deviation (n-1 denominator) from Welford's
// sum of squared deviations m2 over n values; nil for fewer than two.
func sdOf(m2 float64, n int) *float64 {
	if n < 2 {
		return nil
	}
	sd := math.Sqrt(max(m2, 0) / float64(n-1))
	return &sd
}

// sampleSD is the sample standard deviation of values, two-pass (the mean
// first); nil for fewer than two values.
func sampleSD(values []float64) *float64 {
	if len(values) < 2 {
		return nil
	}
	var mean float64
	for _, v := range values {
		mean += v
	}
	mean /= float64(len(values))
	var m2 float64
	for _, v := range values {
		m2 += (v - mean) * (v - mean)
	}
	return sdOf(m2, len(values))
}

// Aggregate summarises a run: per score the mean over the trials that
// reported it (failed trials and evaluator errors are left out of the
// means and counted as errored), and, when records ran more than one trial,
// pass@k and pass^k for k = 1..trials. pass@k is computed per record over
// its trials whose pass signal is decidable (not failed, every pass
// evaluator scored), then averaged over the records with at least k of them.
func Aggregate(cfgs []spec.Evaluator, trials []TrialResult) Summary {
	var s Summary
	perEval := make([]*meanAcc, len(cfgs))
	for i := range perEval {
		perEval[i] = newMeanAcc()
	}
	all := newMeanAcc()
	errored := make([]int, len(cfgs))
	rules := passRules(cfgs)

	type tally struct{ n, c, trials int }
	byRecord := map[string]*tally{}
	var recordOrder []string
	type group struct {
		trials, errored int
		acc             *meanAcc
	}
	groups := map[string]*group{}
	var groupOrder []string

	for _, t := range trials {
		s.TrialsRun++
		rt := byRecord[t.RecordID]
		if rt == nil {
			rt = &tally{}
			byRecord[t.RecordID] = rt
			recordOrder = append(recordOrder, t.RecordID)
		}
		rt.trials++

		g := groups[t.Group]
		if t.Group != "" && g == nil {
			g = &group{acc: newMeanAcc()}
			groups[t.Group] = g
			groupOrder = append(groupOrder, t.Group)
		}
		trialErrored := t.Err != ""
		results := make([]EvaluatorResult, len(cfgs))
		usable := make([]bool, len(cfgs))
		for i, c := range cfgs {
			if t.Err != "" {
				errored[i]++
				continue
			}
			r, ok := resultFor(t, i, c.Name)
			if !ok || r.Err != "" {
				errored[i]++
				trialErrored = true
				continue
			}
			results[i], usable[i] = r, true
			for _, sc := range r.Scores {
				perEval[i].add(sc.Name, t.RecordID, sc.Value)
				all.add(sc.Name, t.RecordID, sc.Value)
				if g != nil {
					g.acc.add(sc.Name, t.RecordID, sc.Value)
				}
			}
		}
		if trialErrored {
			s.Errored++
		}
		if g != nil {
			g.trials++
			if trialErrored {
				g.errored++
			}
		}

		if len(rules) == 0 || t.Err != "" {
			continue
		}
		decided, passed := true, true
		for _, r := range rules {
			if !usable[r.index] {
				decided = false
				break
			}
			p, ok := r.pass(results[r.index].Scores)
			if !ok {
				decided = false
				break
			}
			passed = passed && p
		}
		if decided {
			rt.n++
			if passed {
				rt.c++
			}
		}
	}

	s.Records = len(recordOrder)
	for _, id := range recordOrder {
		s.Trials = max(s.Trials, byRecord[id].trials)
	}
	for i, c := range cfgs {
		s.Evaluators = append(s.Evaluators, EvaluatorSummary{Name: c.Name, Errored: errored[i], Scores: perEval[i].means()})
	}
	s.Means = all.means()
	for _, name := range groupOrder {
		g := groups[name]
		s.Groups = append(s.Groups, GroupSummary{Name: name, Trials: g.trials, Errored: g.errored, Means: g.acc.means()})
	}
	for _, r := range rules {
		s.PassSignal = append(s.PassSignal, r.name)
	}

	if len(rules) == 0 || s.Trials < 2 {
		return s
	}
	for k := 1; k <= s.Trials; k++ {
		var at, hat float64
		var ats, hats []float64
		for _, id := range recordOrder {
			rt := byRecord[id]
			if rt.n < k {
				continue
			}
			a, h := PassAtK(rt.n, rt.c, k), PassHatK(rt.n, rt.c, k)
			at, hat = at+a, hat+h
			ats, hats = append(ats, a), append(hats, h)
		}
		n := len(ats)
		if n == 0 {
			continue
		}
		s.PassAtK = append(s.PassAtK, PassK{K: k, Value: at / float64(n), Records: n, SD: sampleSD(ats)})
		s.PassHatK = append(s.PassHatK, PassK{K: k, Value: hat / float64(n), Records: n, SD: sampleSD(hats)})
	}
	return s
}

package evaluate

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"evals.si/spec"
)

func agentTrial(rec string, trial int, pass bool, quality float64) TrialResult {
	return TrialResult{RecordID: rec, Trial: trial, Evaluations: []EvaluatorResult{
		{Evaluator: TaskSuccess, Scores: []Score{{Name: "task-success", Value: b2f(pass)}, {Name: "task-score", Value: b2f(pass)}}},
		{Evaluator: CodeQuality, Scores: []Score{{Name: "code-quality", Value: quality}, {Name: "mergeable", Value: b2f(quality >= 4)}}},
	}}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestAggregateAgentRun(t *testing.T) {
	cfgs := []spec.Evaluator{{Name: TaskSuccess}, {Name: CodeQuality}}
	trials := []TrialResult{
		// Record a: 5 trials, 2 pass (the pass@k worked example).
		agentTrial("a", 1, true, 5), agentTrial("a", 2, false, 3), agentTrial("a", 3, true, 4),
		agentTrial("a", 4, false, 2), agentTrial("a", 5, false, 1),
		// Record b: 5 trials, one infra error, one code-quality error, 3 decidable passes.
		agentTrial("b", 1, true, 4), agentTrial("b", 2, true, 4), agentTrial("b", 3, true, 4),
		{RecordID: "b", Trial: 4, Err: "pulling image: connection refused"},
		{RecordID: "b", Trial: 5, Evaluations: []EvaluatorResult{
			{Evaluator: TaskSuccess, Scores: []Score{{Name: "task-success", Value: 0}, {Name: "task-score", Value: 0}}},
			{Evaluator: CodeQuality, Err: "the judge gave no usable reply"},
		}},
	}
	s := Aggregate(cfgs, trials)

	if s.Records != 2 || s.Trials != 5 || s.TrialsRun != 10 || s.Errored != 2 {
		t.Errorf("records %d trials %d run %d errored %d, want 2 5 10 2", s.Records, s.Trials, s.TrialsRun, s.Errored)
	}
	if len(s.Evaluators) != 2 || s.Evaluators[0].Errored != 1 || s.Evaluators[1].Errored != 2 {
		t.Errorf("evaluator summaries = %+v", s.Evaluators)
	}
	scores := s.Scores()
	// task-success over the 9 scored trials: a 2/5, b 3/4 → 5/9.
	if !near(scores["task-success"], 5.0/9) || !near(scores["code-quality"], (5+3+4+2+1+4+4+4)/8.0) {
		t.Errorf("means = %v", scores)
	}
	if got := s.Means[0]; got.Name != "task-success" || got.N != 9 {
		t.Errorf("first mean = %+v", got)
	}
	if len(s.PassSignal) != 1 || s.PassSignal[0] != TaskSuccess {
		t.Errorf("pass signal = %v", s.PassSignal)
	}
	// Record a: n=5, c=2. Record b: n=4 (the infra error is left out), c=3.
	for k := 1; k <= 5; k++ {
		wantAt := PassAtK(5, 2, k)
		wantHat := PassHatK(5, 2, k)
		records := 1
		if k <= 4 {
			wantAt = (wantAt + PassAtK(4, 3, k)) / 2
			wantHat = (wantHat + PassHatK(4, 3, k)) / 2
			records = 2
		}
		at, hat := s.PassAtK[k-1], s.PassHatK[k-1]
		if at.K != k || !near(at.Value, wantAt) || at.Records != records || !near(hat.Value, wantHat) {
			t.Errorf("k=%d: pass@k %+v pass^k %+v, want %v %v over %d records", k, at, hat, wantAt, wantHat, records)
		}
	}
	if !near(scores["pass@1"], (0.4+0.75)/2) || !near(scores["pass^2"], (0.1+0.5)/2) || !near(scores["pass@5"], 1) {
		t.Errorf("pass scores = %v", scores)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Errorf("summary does not encode: %v", err)
	}
}

func TestAggregatePlainRun(t *testing.T) {
	th := 0.5
	cfgs := []spec.Evaluator{{Name: ExactMatch}, {Name: LLMJudge, Threshold: &th}, {Name: JSONValid}}
	trial := func(rec string, i int, exact, judge, js float64) TrialResult {
		return TrialResult{RecordID: rec, Trial: i, Evaluations: []EvaluatorResult{
			{Evaluator: ExactMatch, Scores: []Score{{Name: "exact-match", Value: exact}}},
			{Evaluator: LLMJudge, Scores: []Score{{Name: "llm-judge", Value: judge}}},
			{Evaluator: JSONValid, Scores: []Score{{Name: "json-valid", Value: js}}},
		}}
	}
	s := Aggregate(cfgs, []TrialResult{
		trial("q1", 1, 1, 0.9, 1), // pass
		trial("q1", 2, 1, 0.4, 1), // llm-judge below threshold
		trial("q1", 3, 1, 0.5, 0), // json-valid fails
		trial("q2", 1, 1, 0.5, 1), // pass (threshold is inclusive)
		trial("q2", 2, 1, 1, 1),   // pass
		trial("q2", 3, 0, 1, 1),   // exact-match fails
	})
	if got := s.PassSignal; len(got) != 3 || got[0] != ExactMatch || got[1] != LLMJudge || got[2] != JSONValid {
		t.Errorf("pass signal = %v", got)
	}
	want1 := (PassAtK(3, 1, 1) + PassAtK(3, 2, 1)) / 2
	want3hat := (PassHatK(3, 1, 3) + PassHatK(3, 2, 3)) / 2
	if len(s.PassAtK) != 3 || !near(s.PassAtK[0].Value, want1) || !near(s.PassHatK[2].Value, want3hat) {
		t.Errorf("pass@k = %+v pass^k = %+v", s.PassAtK, s.PassHatK)
	}
	if !near(s.Scores()["llm-judge"], (0.9+0.4+0.5+0.5+1+1)/6) {
		t.Errorf("llm-judge mean = %v", s.Scores()["llm-judge"])
	}
}

func TestAggregateNoPassSignal(t *testing.T) {
	// llm-judge without a threshold and agent-efficiency give no pass signal.
	cfgs := []spec.Evaluator{{Name: LLMJudge}, {Name: AgentEfficiency}}
	s := Aggregate(cfgs, []TrialResult{
		{RecordID: "r", Trial: 1, Evaluations: []EvaluatorResult{{Evaluator: LLMJudge, Scores: []Score{{Name: "llm-judge", Value: 1}}}, {Evaluator: AgentEfficiency}}},
		{RecordID: "r", Trial: 2, Evaluations: []EvaluatorResult{{Evaluator: LLMJudge, Scores: []Score{{Name: "llm-judge", Value: 0}}}, {Evaluator: AgentEfficiency}}},
	})
	if s.PassSignal != nil || s.PassAtK != nil || s.PassHatK != nil {
		t.Errorf("pass signal %v, pass@k %v without a pass evaluator", s.PassSignal, s.PassAtK)
	}
	if s.Scores()["llm-judge"] != 0.5 || s.Errored != 0 {
		t.Errorf("summary = %+v", s)
	}
}

func TestAggregateSingleTrial(t *testing.T) {
	cfgs := []spec.Evaluator{{Name: TaskSuccess}}
	s := Aggregate(cfgs, []TrialResult{agentTrial("a", 1, true, 5), agentTrial("b", 1, false, 5)})
	if s.Trials != 1 || s.PassAtK != nil {
		t.Errorf("one trial per record gave pass@k: %+v", s.PassAtK)
	}
	if _, ok := s.Scores()["pass@1"]; ok {
		t.Error("pass@1 reported for a single-trial run")
	}
	if s.Scores()["task-success"] != 0.5 {
		t.Errorf("task-success = %v", s.Scores()["task-success"])
	}
}

func TestAggregateEdgeCases(t *testing.T) {
	cfgs := []spec.Evaluator{{Name: TaskSuccess}}
	// Empty run.
	s := Aggregate(cfgs, nil)
	if s.Records != 0 || len(s.Means) != 0 || len(s.Scores()) != 0 || len(s.Evaluators) != 1 {
		t.Errorf("empty summary = %+v", s)
	}
	// Every trial errored: counted, no means, no pass@k.
	s = Aggregate(cfgs, []TrialResult{{RecordID: "a", Trial: 1, Err: "x"}, {RecordID: "a", Trial: 2, Err: "y"}})
	if s.Errored != 2 || s.Evaluators[0].Errored != 2 || len(s.Means) != 0 || s.PassAtK != nil {
		t.Errorf("all-errored summary = %+v", s)
	}
	// An evaluator missing from a trial's results is an error, not a skip;
	// results out of spec order are found by name.
	s = Aggregate([]spec.Evaluator{{Name: ExactMatch}, {Name: Includes}}, []TrialResult{
		{RecordID: "a", Trial: 1, Evaluations: []EvaluatorResult{
			{Evaluator: Includes, Scores: []Score{{Name: "includes", Value: 1}}},
			{Evaluator: ExactMatch, Scores: []Score{{Name: "exact-match", Value: 0}}},
		}},
		{RecordID: "a", Trial: 2, Evaluations: []EvaluatorResult{{Evaluator: ExactMatch, Scores: []Score{{Name: "exact-match", Value: 1}}}}},
	})
	if s.Errored != 1 || s.Evaluators[1].Errored != 1 || s.Scores()["exact-match"] != 0.5 || s.Means[0].Name != "exact-match" {
		t.Errorf("summary = %+v", s)
	}
	// Trial 2 is undecidable (includes missing): record a has n=1 < 2.
	if len(s.PassAtK) != 1 || s.PassAtK[0].K != 1 || s.PassAtK[0].Value != 0 {
		t.Errorf("pass@k = %+v", s.PassAtK)
	}
}

// Scores break down by record category; a trial that errored counts in its
// category's errored trials and in none of its means.
func TestAggregateGroups(t *testing.T) {
	cfgs := []spec.Evaluator{{Name: TaskSuccess}, {Name: CodeQuality}}
	grouped := func(tr TrialResult, g string) TrialResult { tr.Group = g; return tr }
	trials := []TrialResult{
		grouped(agentTrial("s0", 1, true, 5), "simple_python"),
		grouped(agentTrial("s1", 1, false, 3), "simple_python"),
		grouped(agentTrial("m0", 1, true, 4), "multi_turn_base"),
		{RecordID: "m1", Trial: 1, Group: "multi_turn_base", Err: "harness: setup failed"},
		agentTrial("x", 1, true, 5), // no category: in the run's means only
	}
	s := Aggregate(cfgs, trials)
	if len(s.Groups) != 2 {
		t.Fatalf("groups = %+v, want simple_python and multi_turn_base", s.Groups)
	}
	for _, tc := range []struct {
		group            GroupSummary
		name             string
		trials, errored  int
		success, quality float64
	}{
		{s.Groups[0], "simple_python", 2, 0, 0.5, 4},
		{s.Groups[1], "multi_turn_base", 2, 1, 1, 4},
	} {
		g := tc.group
		if g.Name != tc.name || g.Trials != tc.trials || g.Errored != tc.errored {
			t.Errorf("group %+v, want %s with %d trials, %d errored", g, tc.name, tc.trials, tc.errored)
		}
		means := map[string]float64{}
		for _, m := range g.Means {
			means[m.Name] = m.Mean
		}
		if !near(means["task-success"], tc.success) || !near(means["code-quality"], tc.quality) {
			t.Errorf("%s means = %v, want task-success %v code-quality %v", tc.name, means, tc.success, tc.quality)
		}
	}
	if none := Aggregate(cfgs, []TrialResult{agentTrial("x", 1, true, 5)}); none.Groups != nil {
		t.Errorf("groups without categories = %+v, want none", none.Groups)
	}
}

// Scores of large magnitude (latencies in ns, token counts) keep their
// spread: a sum of squares would cancel to 0 here.
func TestAggregateSDLargeMagnitude(t *testing.T) {
	var trials []TrialResult
	for i, v := range []float64{1.7e9 + 100, 1.7e9 + 101, 1.7e9 + 102, 1.7e9 + 103} {
		trials = append(trials, TrialResult{RecordID: fmt.Sprintf("r%d", i), Evaluations: []EvaluatorResult{{Evaluator: "lat", Scores: []Score{{Name: "lat", Value: v}}}}})
	}
	agg := Aggregate([]spec.Evaluator{{Name: "lat"}}, trials)
	if sd := agg.Means[0].SD; sd == nil || math.Abs(*sd-1.2909944) > 1e-6 {
		t.Errorf("sd = %v, want 1.2909944", sd)
	}
}

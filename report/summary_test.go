package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"evals.si/engine"
	"evals.si/evaluate"
)

// The --json contract keeps its keys and adds the spend: the final
// attempts' and every attempt's, errored and retried ones included.
func TestWriteJSONSpend(t *testing.T) {
	s := &engine.Summary{RunID: "r", Status: "completed", Records: 2, Trials: 1, Errored: 1, Scores: map[string]float64{"x": 1},
		CostUSD: 0.01, Tokens: 100, CostUSDInclRetries: 0.05, TokensInclRetries: 500, Attempts: 4}
	var b bytes.Buffer
	if err := WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"run_id": "r", "status": "completed", "records": 2.0, "trials": 1.0, "errored": 1.0,
		"cost_usd": 0.01, "tokens": 100.0, "cost_usd_incl_retries": 0.05, "tokens_incl_retries": 500.0, "attempts": 4.0} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if _, ok := got["scores"].(map[string]any); !ok {
		t.Errorf("scores = %v", got["scores"])
	}
}

func TestWriteTableSpendInclRetries(t *testing.T) {
	for _, tc := range []struct {
		s    engine.Summary
		want bool
	}{
		{engine.Summary{Records: 1, Trials: 1, CostUSD: 0.01, Tokens: 10, CostUSDInclRetries: 0.01, TokensInclRetries: 10, Attempts: 1}, false},
		{engine.Summary{Records: 1, Trials: 1, CostUSD: 0.01, Tokens: 10, CostUSDInclRetries: 0.03, TokensInclRetries: 30, Attempts: 3}, true},
	} {
		var b bytes.Buffer
		if err := WriteTable(&b, &tc.s); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), "spend incl. retries: $0.0300  tokens: 30  attempts: 3"); got != tc.want {
			t.Errorf("attempts %d: line shown %v, want %v:\n%s", tc.s.Attempts, got, tc.want, b.String())
		}
	}
}

// Per-category means appear under "categories" in --json and as a table
// after the evaluators; a run without categories has neither.
func TestCategories(t *testing.T) {
	s := &engine.Summary{RunID: "r", Status: "completed", Records: 2, Trials: 1}
	s.Aggregate.Groups = []evaluate.GroupSummary{
		{Name: "simple_python", Trials: 1, Means: []evaluate.ScoreMean{{Name: "task-success", Mean: 1, N: 1}}},
		{Name: "multi_turn_base", Trials: 1, Errored: 1},
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Categories map[string]map[string]float64 `json:"categories"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Categories["simple_python"]["task-success"] != 1 || got.Categories["multi_turn_base"] == nil {
		t.Errorf("categories = %v", got.Categories)
	}
	b.Reset()
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CATEGORY", "simple_python  1       0        task-success=1.000", "multi_turn_base  1       1"} {
		if !strings.Contains(strings.Join(strings.Fields(b.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, &engine.Summary{RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "categories") {
		t.Errorf("a run without categories has them in --json: %s", b.String())
	}
}

package engine

import (
	"context"
	"errors"
	"math"
	"testing"

	"evals.si/spec"
	"evals.si/trajectory"
)

// flakyRunner's first attempts of each record make model calls and then
// fail (an infrastructure error), until failures[record] attempts have
// failed; then an attempt completes with its own usage.
type flakyRunner struct {
	failures map[string]int
}

func (r *flakyRunner) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	call := trajectory.Event{Kind: trajectory.KindModelCall, ModelCall: &trajectory.ModelCall{
		Usage: trajectory.Usage{InputTokens: 90, OutputTokens: 10}, CostUSD: 0.01}}
	if err := tc.Emit.Emit(call); err != nil {
		return nil, err
	}
	if tc.Attempt < r.failures[tc.Record.ID] {
		return nil, errors.New("the sandbox fell over")
	}
	return &Outcome{Usage: trajectory.Usage{InputTokens: 45, OutputTokens: 5}, CostUSD: 0.005}, nil
}

// The summary keeps the final attempts' spend in cost_usd and tokens, and
// adds what every attempt spent, errored and retried ones included.
func TestSummarySpendIncludesRetries(t *testing.T) {
	retries := 2
	p := &Plan{
		Name: "spend",
		Spec: &spec.Spec{Retries: &retries, Concurrency: 1}, Limits: LimitsOf(&spec.Spec{Retries: &retries, Concurrency: 1}),
		Records: []spec.Record{
			{ID: "ok"},    // one attempt: 50 tokens, $0.005
			{ID: "retry"}, // one failed (100, $0.01), then 50, $0.005
			{ID: "dead"},  // three failed: 300, $0.03; errored
		},
		Runner: &flakyRunner{failures: map[string]int{"retry": 1, "dead": 3}},
	}
	sum := runPlan(t, &batchRecorder{}, p)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if sum.Errored != 1 || sum.Tokens != 100 || !near(sum.CostUSD, 0.01) {
		t.Errorf("final attempts: errored %d, tokens %d, cost %v; want 1, 100, 0.01", sum.Errored, sum.Tokens, sum.CostUSD)
	}
	if sum.Attempts != 6 || sum.TokensInclRetries != 50+150+300 || !near(sum.CostUSDInclRetries, 0.005+0.015+0.03) {
		t.Errorf("incl. retries: attempts %d, tokens %d, cost %v; want 6, 500, 0.05", sum.Attempts, sum.TokensInclRetries, sum.CostUSDInclRetries)
	}
}

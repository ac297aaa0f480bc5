package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// recorder writes the engine's run into the store.
type recorder struct {
	store *store.Store
}

func (r *recorder) StartRun(ctx context.Context, rs engine.RunStart) (string, error) {
	var s spec.Spec
	if err := json.Unmarshal(rs.Spec, &s); err != nil {
		return "", fmt.Errorf("decoding spec for the store: %w", err)
	}
	run, err := r.store.CreateRun(ctx, store.RunInput{Name: rs.Name, Spec: &s, SpecPath: rs.SpecPath})
	if err != nil {
		return "", err
	}
	return run.ID, nil
}

func (r *recorder) FinishRun(ctx context.Context, runID, status string, sum *engine.Summary, errMsg string) error {
	b, err := json.Marshal(sum)
	if err != nil {
		return fmt.Errorf("encoding summary: %w", err)
	}
	return r.store.FinishRun(ctx, runID, status, b, errMsg)
}

// StartTrial creates the trial, or resets it for a retry, and marks it
// running. A retry discards the failed attempt's events and scores; the
// attempt counter says it happened.
func (r *recorder) StartTrial(ctx context.Context, runID string, rec spec.Record, trial, attempt int) (string, error) {
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("encoding record %s: %w", rec.ID, err)
	}
	in := store.TrialInput{RunID: runID, RecordID: rec.ID, Trial: trial, Record: recJSON}
	t, err := r.store.UpsertTrial(ctx, in)
	if err != nil {
		return "", err
	}
	// A trial left running by a killed process has a partial trajectory:
	// rerun it from the start, as resume promises.
	if t.Status != store.TrialPending || attempt > 0 {
		if _, err := r.store.ResetTrial(ctx, t.ID); err != nil {
			return "", err
		}
	}
	t, err = r.store.StartTrial(ctx, in)
	if err != nil {
		return "", err
	}
	return t.ID, nil
}

func (r *recorder) AppendEvent(ctx context.Context, trialID string, e trajectory.Event) error {
	return r.store.AppendEvent(ctx, trialID, e)
}

func (r *recorder) FinishTrial(ctx context.Context, trialID string, o *engine.Outcome) error {
	var scores []store.Score
	for _, ev := range o.Evaluations {
		for _, s := range ev.Scores {
			scores = append(scores, store.Score{Name: s.Name, Value: s.Value, Details: s.Details})
		}
	}
	if len(scores) > 0 {
		if err := r.store.PutScores(ctx, trialID, scores); err != nil {
			return err
		}
	}
	if o.Diff != "" {
		if _, err := r.store.PutArtifact(ctx, trialID, "diff.patch", "text/x-diff", bytes.NewReader([]byte(o.Diff))); err != nil {
			return err
		}
	}
	if evs := evalErrors(o); evs != nil {
		if _, err := r.store.PutArtifact(ctx, trialID, "evaluator-errors.json", "application/json", bytes.NewReader(evs)); err != nil {
			return err
		}
	}
	if o.Status != engine.TrialErrored {
		if err := putEvaluations(ctx, r.store, trialID, o); err != nil {
			return err
		}
	}
	res := store.TrialResult{
		Status: store.TrialFinished, ErrorKind: o.ErrorKind, Error: o.Error, Output: o.Output,
		Isolation: o.Isolation, Usage: o.Usage, CostUSD: o.CostUSD,
	}
	if o.Status == engine.TrialErrored {
		res.Status = store.TrialErrored
	}
	if o.Verdict != nil {
		pass := o.Verdict.Pass
		res.Passed = &pass
	}
	return r.store.FinishTrial(ctx, trialID, res)
}

func evalErrors(o *engine.Outcome) []byte {
	m := map[string]string{}
	for _, ev := range o.Evaluations {
		if ev.Err != "" {
			m[ev.Evaluator] = ev.Err
		}
	}
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

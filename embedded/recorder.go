package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// recorder writes the engine's run into the store. Before a run writes
// anything, it registers the run's secrets with the store, which redacts
// them from every text it keeps (store.AddSecrets).
type recorder struct {
	store *store.Store
	// getenv reads the worker variables the spec names (default
	// os.Getenv, which the CLI agent reads env_from with).
	getenv func(string) string

	mu      sync.Mutex
	secrets map[string]bool // runs whose secrets are registered
}

func (r *recorder) StartRun(ctx context.Context, rs engine.RunStart) (string, error) {
	var s spec.Spec
	if err := json.Unmarshal(rs.Spec, &s); err != nil {
		return "", fmt.Errorf("decoding spec for the store: %w", err)
	}
	r.store.AddSecrets(runSecrets(&s, r.env())...)
	run, err := r.store.CreateRun(ctx, store.RunInput{Name: rs.Name, Spec: &s, SpecPath: rs.SpecPath})
	if err != nil {
		return "", err
	}
	r.registered(run.ID)
	return run.ID, nil
}

func (r *recorder) env() func(string) string {
	if r.getenv != nil {
		return r.getenv
	}
	return os.Getenv
}

// registered notes that runID's secrets are registered and reports whether
// they were already.
func (r *recorder) registered(runID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secrets[runID] {
		return true
	}
	if r.secrets == nil {
		r.secrets = map[string]bool{}
	}
	r.secrets[runID] = true
	return false
}

// registerStored registers the secrets of a run this recorder did not start
// (a resumed run), from its stored spec.
func (r *recorder) registerStored(ctx context.Context, runID string) error {
	if r.registered(runID) {
		return nil
	}
	run, err := r.store.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("reading run %s for its secrets: %w", runID, err)
	}
	s, err := run.DecodeSpec()
	if err != nil {
		return err
	}
	r.store.AddSecrets(runSecrets(s, r.env())...)
	return nil
}

// runSecrets are the values of every worker variable the spec names (see
// spec.Spec.SecretNames).
func runSecrets(s *spec.Spec, getenv func(string) string) []string {
	return s.SecretValues(getenv)
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
	if err := r.registerStored(ctx, runID); err != nil {
		return "", err
	}
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
		SpendUsage: o.Spend.Usage, SpendCostUSD: o.Spend.CostUSD,
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

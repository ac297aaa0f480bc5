package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"evals.si/engine"
	"evals.si/runqueue"
	"evals.si/spec"
	"evals.si/store"
)

// ResumeError is a run that cannot be resumed as asked (unknown id, already
// completed, its dataset changed): a usage error, exit 2.
type ResumeError struct{ Err error }

func (e ResumeError) Error() string { return e.Err.Error() }
func (e ResumeError) Unwrap() error { return e.Err }

// Resume continues a run that was interrupted or killed. The spec is the
// one stored with the run (so --judge-* overrides given then still hold);
// the dataset is loaded again from it, relative paths against the spec
// file's directory. Finished trials (completed or errored) are kept as they
// are; trials left pending or running, and those never started, run again
// from the start. The summary aggregates both, each trial once.
//
// The process that ran the run must be gone: resume cannot tell a live run
// from a killed one, and two engines on one run would race.
func (a *App) Resume(ctx context.Context, runID string, o RunOptions) (*engine.Summary, error) {
	if err := o.budgetErr(); err != nil {
		return nil, err
	}
	run, err := a.store.GetRun(ctx, runID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return nil, ResumeError{fmt.Errorf("resuming run %s: %w", runID, err)}
		}
		return nil, err
	}
	if run.Status == store.RunCompleted {
		return nil, ResumeError{fmt.Errorf("run %s is already completed; there is nothing to resume (start a new run with evalsi run -f SPEC)", run.ID)}
	}
	s, err := run.DecodeSpec()
	if err != nil {
		return nil, err
	}
	f := &spec.File{Spec: s, Path: run.SpecPath, Dir: specDir(run.SpecPath)}
	if err := s.Validate(); err != nil {
		return nil, ResumeError{fmt.Errorf("resuming run %s: its stored spec no longer validates: %w", run.ID, err)}
	}
	records, err := a.planner.Records(ctx, f)
	if err != nil {
		return nil, err
	}
	plan, err := a.planner.Plan(ctx, f)
	if err != nil {
		return nil, err
	}
	defer closePlan(plan)
	trials, err := a.store.ListTrials(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	// The store holds records with the run's secrets redacted; compare the
	// dataset's the same way.
	a.store.AddSecrets(s.SecretValues(a.getenv)...)
	if err := sameRecords(run.ID, records, trials, a.store.RedactJSON); err != nil {
		return nil, ResumeError{err}
	}
	if s.IsAgentRun() {
		if err := a.planner.Envs.Sweep(); err != nil {
			return nil, err
		}
	}
	// Attempts the dead process left running go back to the queue as new
	// attempts; trials it never registered are registered now.
	if err := runqueue.Reopen(ctx, a.store, run.ID, records, plan.Limits.Trials); err != nil {
		return nil, err
	}
	done, err := runqueue.Outcomes(ctx, a.store, run.ID, len(plan.Evaluators))
	if err != nil {
		return nil, ResumeError{fmt.Errorf("resuming run %s: %w", run.ID, err)}
	}
	// The cap is the run's whole spend: what its trials spent before
	// (unfinished ones' errored attempts included) counts against it. The
	// wall clock runs from this resume.
	budget := engine.NewBudget(engine.RunBudgetOf(s, o.MaxCostUSD, o.MaxTokens), time.Now())
	if trials, err = a.store.ListTrials(ctx, run.ID); err != nil {
		return nil, err
	}
	for _, t := range trials { // each trial's current attempt: its spend counts the earlier ones
		budget.Add(&engine.Outcome{RecordID: t.RecordID, Trial: t.Trial, Usage: t.Usage, CostUSD: t.CostUSD,
			Spend: engine.Spend{Usage: t.SpendUsage, CostUSD: t.SpendCostUSD}})
	}
	a.logger.Info("resuming run", "run", run.ID, "finished", len(done), "total", len(records)*plan.Limits.Trials)
	return a.work(ctx, run.ID, plan, len(records), done, budget, o)
}

func specDir(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return filepath.Dir(path)
}

// sameRecords refuses to resume when a stored trial's record is gone from
// the dataset or differs from it: mixing trials of two datasets in one run
// would make its scores meaningless.
func sameRecords(runID string, recs []spec.Record, trials []store.Trial, redact func([]byte) []byte) error {
	byID := make(map[string][]byte, len(recs))
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding record %s: %w", r.ID, err)
		}
		byID[r.ID] = redact(b)
	}
	for _, t := range trials {
		cur, ok := byID[t.RecordID]
		if !ok {
			return fmt.Errorf("cannot resume run %s: its dataset no longer has record %q; resume needs the dataset the run started with", runID, t.RecordID)
		}
		if t.Record == nil {
			continue
		}
		var a, b bytes.Buffer
		if json.Compact(&a, t.Record) != nil || json.Compact(&b, cur) != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
			return fmt.Errorf("cannot resume run %s: record %q changed in the dataset since the run started; resume needs the dataset the run started with", runID, t.RecordID)
		}
	}
	return nil
}

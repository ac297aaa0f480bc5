package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"evals.si/engine"
	"evals.si/evaluate"
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
	plan, err := a.plan(ctx, f)
	if err != nil {
		return nil, err
	}
	defer a.closePlan(plan)
	trials, err := a.store.ListTrials(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	// The store holds records with the run's secrets redacted; compare the
	// dataset's the same way.
	a.store.AddSecrets(runSecrets(s, os.Getenv)...)
	if err := sameRecords(run.ID, plan.Records, trials, a.store.RedactJSON); err != nil {
		return nil, ResumeError{err}
	}
	done, err := a.finishedOutcomes(ctx, run.ID, trials, plan.Evaluators)
	if err != nil {
		return nil, err
	}
	if _, err := a.store.ResumeRun(ctx, run.ID); err != nil {
		return nil, err
	}
	if s.IsAgentRun() {
		if err := a.envs.Sweep(); err != nil {
			return nil, err
		}
	}
	a.logger.Info("resuming run", "run", run.ID, "finished", len(done), "total", len(plan.Records)*max(s.Trials, 1))
	plan.Resume = &engine.Resume{RunID: run.ID, Done: done}
	return a.execute(ctx, plan, o)
}

// specPath is the spec file's absolute path, stored with the run so that
// resume resolves relative dataset paths as the run did, from any directory.
func specPath(f *spec.File) string {
	switch {
	case f.Path == "" || filepath.IsAbs(f.Path):
		return f.Path
	case filepath.IsAbs(f.Dir):
		return filepath.Join(f.Dir, filepath.Base(f.Path))
	}
	if abs, err := filepath.Abs(f.Path); err == nil {
		return abs
	}
	return f.Path
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

// finishedOutcomes reads the run's finished trials back as engine outcomes,
// with their per-evaluator results exactly as they were recorded.
func (a *App) finishedOutcomes(ctx context.Context, runID string, trials []store.Trial, evals []spec.Evaluator) ([]*engine.Outcome, error) {
	stored, err := a.store.Evaluations(ctx, runID)
	if err != nil {
		return nil, err
	}
	var out []*engine.Outcome
	for _, t := range trials {
		if t.Unfinished() {
			continue
		}
		o := &engine.Outcome{
			// The store counts attempts from 1, the engine from 0.
			RunID: runID, RecordID: t.RecordID, Trial: t.Trial, Attempt: max(t.Attempt-1, 0),
			Status: engine.TrialCompleted, ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output,
			Usage: t.Usage, CostUSD: t.CostUSD, Isolation: t.Isolation, Started: t.StartedAt, Finished: t.FinishedAt,
			Spend: engine.Spend{Usage: t.SpendUsage, CostUSD: t.SpendCostUSD},
		}
		if t.Status == store.TrialErrored {
			o.Status = engine.TrialErrored
			out = append(out, o)
			continue
		}
		raw, ok := stored[t.ID]
		if !ok {
			return nil, fmt.Errorf("resuming run %s: finished trial %s (record %q, trial %d) has no stored evaluator results; it was recorded by an evalsi without resume support", runID, t.ID, t.RecordID, t.Trial)
		}
		if err := json.Unmarshal(raw, &o.Evaluations); err != nil {
			return nil, fmt.Errorf("resuming run %s: decoding evaluator results of trial %s: %w", runID, t.ID, err)
		}
		if len(o.Evaluations) != len(evals) {
			return nil, fmt.Errorf("resuming run %s: trial %s has %d evaluator results, the spec %d evaluators", runID, t.ID, len(o.Evaluations), len(evals))
		}
		out = append(out, o)
	}
	return out, nil
}

// putEvaluations stores a finished trial's per-evaluator results, so that a
// resumed run aggregates it exactly as the run would have.
func putEvaluations(ctx context.Context, st *store.Store, trialID string, o *engine.Outcome) error {
	evs := o.Evaluations
	if evs == nil {
		evs = []evaluate.EvaluatorResult{}
	}
	b, err := json.Marshal(evs)
	if err != nil {
		return fmt.Errorf("encoding evaluator results of trial %s: %w", trialID, err)
	}
	return st.PutEvaluations(ctx, trialID, b)
}

package regress

import (
	"context"
	"fmt"
	"log/slog"

	"evals.si/spec"
	"evals.si/store"
)

// SourceRunKey is the metadata key under which a record served from a run
// carries what that run made of it (SourceRun).
const SourceRunKey = "source_run"

// SourceRun is metadata.source_run of a record served by RunSource: where it
// came from and the output and scores it got there, for re-scoring.
type SourceRun struct {
	RunID    string             `json:"run_id"`
	RecordID string             `json:"record_id"`
	Trial    int                `json:"trial"`
	TrialID  string             `json:"trial_id"`
	Output   string             `json:"output"`
	Passed   *bool              `json:"passed,omitempty"`
	Scores   map[string]float64 `json:"scores"`
}

// RunSource serves dataset: {run: {run_id, trial, all_trials}} from a store
// (it implements dataset.RunRecords): one record per record of the run,
// taken from trial `trial` (default 0), or with all_trials one per trial,
// with id <record>#<trial>. Each record is the one the run stored for the
// trial, its metadata extended with source_run (SourceRun).
//
// Only finished trials give records. An errored trial has no output of the
// agent's (an infrastructure failure is not an answer to re-score), and an
// unfinished one has none yet; both are skipped and counted in the log.
type RunSource struct {
	store  RunReader
	logger *slog.Logger
}

// NewRunSource returns a RunSource reading st; logger (default slog.Default)
// gets one line per dataset served, with what was skipped.
func NewRunSource(st RunReader, logger *slog.Logger) *RunSource {
	if logger == nil {
		logger = slog.Default()
	}
	return &RunSource{store: st, logger: logger}
}

// RunRecords returns the records of run d.RunID (an id or unique prefix).
func (s *RunSource) RunRecords(ctx context.Context, d spec.RunDataset) ([]spec.Record, error) {
	r, err := loadRun(ctx, s.store, d.RunID)
	if err != nil {
		return nil, err
	}
	want := 0
	if d.Trial != nil {
		want = *d.Trial
	}
	var (
		recs                []spec.Record
		seen                bool // some record has trial `want`
		maxTrial            = -1
		errored, unfinished int
	)
	for _, t := range r.trials {
		maxTrial = max(maxTrial, t.Trial)
		if !d.AllTrials && t.Trial != want {
			continue
		}
		seen = true
		switch t.Status {
		case store.TrialFinished:
		case store.TrialErrored:
			errored++
			continue
		default:
			unfinished++
			continue
		}
		rec, err := r.record(t)
		if err != nil {
			return nil, err
		}
		if d.AllTrials {
			rec.ID = fmt.Sprintf("%s#%d", t.RecordID, t.Trial)
		}
		src := SourceRun{RunID: r.run.ID, RecordID: t.RecordID, Trial: t.Trial, TrialID: t.ID, Output: t.Output, Passed: t.Passed, Scores: r.scoreMap(t)}
		if rec.Metadata, err = withMetadata(rec.Metadata, SourceRunKey, src); err != nil {
			return nil, fmt.Errorf("run %s: record %s: %w", r.run.ID, t.RecordID, err)
		}
		recs = append(recs, rec)
	}
	switch {
	case len(r.trials) == 0:
		return nil, fmt.Errorf("run %s has no trials", r.run.ID)
	case !seen:
		return nil, fmt.Errorf("run %s has no trial %d: its records ran trials 0 to %d", r.run.ID, want, maxTrial)
	case len(recs) == 0:
		return nil, fmt.Errorf("run %s has no finished trial to take records from (%d errored, %d unfinished)", r.run.ID, errored, unfinished)
	}
	s.logger.Info("dataset from a run", "run", r.run.ID, "records", len(recs), "all_trials", d.AllTrials,
		"skipped_errored", errored, "skipped_unfinished", unfinished)
	return recs, nil
}

// RecordedInputs returns the records run runID (id or unique prefix) ran,
// one per record in the order they were enqueued, whatever became of their
// trials: the inputs a shadow replay gives a candidate. It also returns the
// run.
func RecordedInputs(ctx context.Context, st RunReader, runID string) (store.Run, []spec.Record, error) {
	r, err := loadRun(ctx, st, runID)
	if err != nil {
		return store.Run{}, nil, err
	}
	var recs []spec.Record
	seen := map[string]bool{}
	for _, t := range r.trials {
		if seen[t.RecordID] {
			continue
		}
		seen[t.RecordID] = true
		rec, err := r.record(t)
		if err != nil {
			return store.Run{}, nil, err
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return store.Run{}, nil, fmt.Errorf("run %s has no trials, so no recorded inputs", r.run.ID)
	}
	return r.run, recs, nil
}

// Package regress closes the loop from runs back to datasets: a run's
// records served as a dataset (dataset: {run: ...}), failures promoted into
// a JSONL dataset under datasets_dir (evalsi promote), and the baseline of a
// shadow replay (evalsi shadow).
package regress

import (
	"context"
	"encoding/json"
	"fmt"

	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// RunReader is the part of a store that reads a finished run: *store.Store,
// a PostgreSQL store and report.DetailStore all have it.
type RunReader interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListTrials(ctx context.Context, runID string) ([]store.Trial, error)
	Scores(ctx context.Context, runID string) (map[string][]store.Score, error)
}

// EventReader reads a trial's trajectory, for --include-outputs.
type EventReader interface {
	Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error)
}

// storedRun is a run with its current attempts and their scores.
type storedRun struct {
	run    store.Run
	trials []store.Trial
	scores map[string][]store.Score
}

// loadRun reads a run by id or unique prefix.
func loadRun(ctx context.Context, st RunReader, id string) (storedRun, error) {
	run, err := st.GetRun(ctx, id)
	if err != nil {
		return storedRun{}, fmt.Errorf("reading run %s: %w", id, err)
	}
	trials, err := st.ListTrials(ctx, run.ID)
	if err != nil {
		return storedRun{}, fmt.Errorf("reading the trials of run %s: %w", run.ID, err)
	}
	scores, err := st.Scores(ctx, run.ID)
	if err != nil {
		return storedRun{}, fmt.Errorf("reading the scores of run %s: %w", run.ID, err)
	}
	return storedRun{run: run, trials: trials, scores: scores}, nil
}

// record decodes the dataset record a trial ran, as stored with it.
func (r storedRun) record(t store.Trial) (spec.Record, error) {
	if len(t.Record) == 0 || string(t.Record) == "null" {
		// Runs recorded before trials kept their record have only the id.
		return spec.Record{}, fmt.Errorf("run %s: trial %s (record %s) has no stored record; the run predates stored records, so run its spec again to get one that has them", r.run.ID, t.ID, t.RecordID)
	}
	var rec spec.Record
	if err := json.Unmarshal(t.Record, &rec); err != nil {
		return spec.Record{}, fmt.Errorf("run %s: decoding the stored record of trial %s (record %s): %w", r.run.ID, t.ID, t.RecordID, err)
	}
	// The trial row's record id is what every report uses; a stored record
	// always agrees with it, but the row is the one to trust.
	rec.ID = t.RecordID
	return rec, nil
}

// scoreMap is a trial's scores by name.
func (r storedRun) scoreMap(t store.Trial) map[string]float64 {
	m := map[string]float64{}
	for _, s := range r.scores[t.ID] {
		m[s.Name] = s.Value
	}
	return m
}

// withMetadata returns a copy of md with key set to v's JSON; the record's
// own metadata map is never changed in place.
func withMetadata(md map[string]spec.JSON, key string, v any) (map[string]spec.JSON, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding metadata.%s: %w", key, err)
	}
	out := make(map[string]spec.JSON, len(md)+1)
	for k, val := range md {
		out[k] = val
	}
	out[key] = b
	return out, nil
}

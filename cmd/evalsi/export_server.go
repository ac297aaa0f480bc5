package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"evals.si/report"
	"evals.si/store"
	"evals.si/trajectory"
)

// exportedRun is a run read from a server's JSONL export, spooled to a
// temporary file: what `runs export --format parquet --server` converts, so
// its rows have what the trial list of the API lacks (each trial's record
// and isolation report) and match an embedded export's. Only one trial's
// line is decoded at a time.
type exportedRun struct {
	run    store.Run
	file   *os.File
	trials []store.Trial
	scores map[string][]store.Score
	lines  map[string][2]int64 // trial id → offset and length of its line
}

var _ report.ExportStore = (*exportedRun)(nil)

// spoolExport downloads run's export from the server into a temporary file
// and indexes it; Close removes the file.
func spoolExport(ctx context.Context, s *apiStore, runID string) (*exportedRun, error) {
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "evalsi-export-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("spooling the export of run %s: %w", run.ID, err)
	}
	os.Remove(f.Name()) // unlinked: gone when closed, whatever happens
	e := &exportedRun{run: run, file: f, scores: map[string][]store.Score{}, lines: map[string][2]int64{}}
	if err := s.ExportJSONL(ctx, f, run.ID); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			var t report.ExportTrial
			if jerr := json.Unmarshal(b, &t); jerr != nil {
				f.Close()
				return nil, fmt.Errorf("reading the export of run %s at byte %d: %w", run.ID, off, jerr)
			}
			e.trials = append(e.trials, store.Trial{ID: t.TrialID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt,
				Status: t.Status, Passed: t.Passed, ErrorKind: t.ErrorKind, Error: t.Error, Record: t.Record, Output: t.Output,
				Isolation: t.Isolation, Usage: t.Usage, CostUSD: t.CostUSD})
			e.scores[t.TrialID] = storeScores(t.Scores)
			e.lines[t.TrialID] = [2]int64{off, int64(len(b))}
			off += int64(len(b))
		}
		if errors.Is(err, io.EOF) {
			return e, nil
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("reading the export of run %s: %w", run.ID, err)
		}
	}
}

func (e *exportedRun) Close() error { return e.file.Close() }

func (e *exportedRun) GetRun(ctx context.Context, id string) (store.Run, error) { return e.run, nil }

func (e *exportedRun) ListTrials(ctx context.Context, runID string) ([]store.Trial, error) {
	return e.trials, nil
}

func (e *exportedRun) Scores(ctx context.Context, runID string) (map[string][]store.Score, error) {
	return e.scores, nil
}

// Events reads the trial's line again and returns a page of its events.
func (e *exportedRun) Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error) {
	at, ok := e.lines[trialID]
	if !ok {
		return nil, fmt.Errorf("trial %s: %w", trialID, store.ErrNotFound)
	}
	b := make([]byte, at[1])
	if _, err := e.file.ReadAt(b, at[0]); err != nil {
		return nil, fmt.Errorf("reading the events of trial %s: %w", trialID, err)
	}
	var line struct {
		Events []trajectory.Event `json:"events"`
	}
	if err := json.Unmarshal(b, &line); err != nil {
		return nil, fmt.Errorf("reading the events of trial %s: %w", trialID, err)
	}
	var out []trajectory.Event
	for _, ev := range line.Events {
		if ev.Seq > afterSeq && (limit <= 0 || len(out) < limit) {
			out = append(out, ev)
		}
	}
	return out, nil
}

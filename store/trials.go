package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"evals.si/trajectory"
)

// Trial statuses. pending and running are unfinished (resume reruns them);
// finished and errored are terminal; so are TrialLost (backend.go), an
// attempt a later attempt replaced, and TrialCancelled (cancel.go).
const (
	TrialPending  = "pending"
	TrialRunning  = "running"
	TrialFinished = "finished" // ran to its end; Passed holds the verdict, if any
	TrialErrored  = "errored"  // an infrastructure error prevented a verdict
)

// Trial is one attempt at one trial (trial index Trial of one record).
type Trial struct {
	ID       string
	RunID    string
	RecordID string
	// Trial is the 0-based trial index of the record.
	Trial int
	// Attempt counts attempts at this trial, from 1, lost ones included.
	Attempt int
	Status  string
	// Passed is the checker's verdict on a finished trial; nil when there is
	// none (no checker, or not finished).
	Passed *bool
	// ErrorKind and Error describe why an errored trial errored.
	ErrorKind string
	Error     string
	// Record is the dataset record the trial ran, as JSON, when given.
	Record json.RawMessage
	// Output is the trial's final output (the answer). Outputs larger than
	// InlineLimit are kept in a blob, named by OutputBlob, and read back here.
	Output     string
	OutputBlob string
	// Isolation is the sandbox's isolation report, as JSON.
	Isolation json.RawMessage
	Usage     trajectory.Usage
	CostUSD   float64
	// SpendUsage and SpendCostUSD are what every attempt of the trial
	// spent, errored and retried ones included; Usage and CostUSD are the
	// final attempt's. Zero for trials recorded without them.
	SpendUsage   trajectory.Usage
	SpendCostUSD float64
	// RetriesUsed counts earlier attempts that errored and were retried.
	RetriesUsed int
	// LeaseOwner, LeaseUntil and LeaseEpoch are the last lease on the
	// attempt (see Queue).
	LeaseOwner string
	LeaseUntil time.Time
	LeaseEpoch int64

	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// Unfinished reports whether the trial still has to run (pending or running).
func (t Trial) Unfinished() bool { return t.Status == TrialPending || t.Status == TrialRunning }

// TrialInput names a trial: one trial index of one record of a run.
type TrialInput struct {
	RunID    string
	RecordID string
	Trial    int
	// Record is the dataset record as JSON; optional, stored on creation.
	Record json.RawMessage
}

// TrialResult is how a trial ended.
type TrialResult struct {
	// Status is TrialFinished or TrialErrored.
	Status    string
	Passed    *bool
	ErrorKind string
	Error     string
	Output    string
	Isolation json.RawMessage
	Usage     trajectory.Usage
	CostUSD   float64
	// SpendUsage and SpendCostUSD include every attempt's spend (see Trial).
	SpendUsage   trajectory.Usage
	SpendCostUSD float64
}

const trialColumns = `id, run_id, record_id, trial, attempt, status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lease_owner, lease_until, lease_epoch,
	created_at, started_at, finished_at`

func (in TrialInput) validate() error {
	if in.RunID == "" {
		return errors.New("run id is empty")
	}
	if in.RecordID == "" {
		return errors.New("record id is empty")
	}
	if in.Trial < 0 {
		return fmt.Errorf("trial index %d is negative", in.Trial)
	}
	return nil
}

func (in TrialInput) String() string {
	return fmt.Sprintf("run %s record %q trial %d", in.RunID, in.RecordID, in.Trial)
}

// UpsertTrial creates the trial as pending if it does not exist yet and
// returns its current attempt as stored.
//
// Deprecated: use the Queue (Enqueue).
func (s *Store) UpsertTrial(ctx context.Context, in TrialInput) (Trial, error) {
	t, err := s.upsertTrial(ctx, in, false)
	if err != nil {
		return Trial{}, fmt.Errorf("registering trial (%s): %w", in, err)
	}
	return t, nil
}

// StartTrial marks the trial's current attempt running (creating the trial
// if needed) and stamps its start time, without a lease. Starting a
// finished or errored trial is an error: ResetTrial it first.
//
// Deprecated: use the Queue (Lease).
func (s *Store) StartTrial(ctx context.Context, in TrialInput) (Trial, error) {
	t, err := s.upsertTrial(ctx, in, true)
	if err != nil {
		return Trial{}, fmt.Errorf("starting trial (%s): %w", in, err)
	}
	return t, nil
}

func (s *Store) upsertTrial(ctx context.Context, in TrialInput, start bool) (Trial, error) {
	if err := in.validate(); err != nil {
		return Trial{}, err
	}
	record, err := nullJSON("record", s.redact.json(in.Record))
	if err != nil {
		return Trial{}, err
	}
	var t Trial
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now()
		var id, status string
		err := tx.QueryRowContext(ctx, `SELECT id, status FROM trials WHERE run_id = ? AND record_id = ? AND trial = ?
			ORDER BY attempt DESC LIMIT 1`, in.RunID, in.RecordID, in.Trial).Scan(&id, &status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			id = newID("t", now)
			status = TrialPending
			var started any
			if start {
				status, started = TrialRunning, formatTime(now)
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO trials (id, run_id, record_id, trial, seq, status, record, created_at, started_at)
				VALUES (?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM trials WHERE run_id = ?2), ?, ?, ?, ?)`,
				id, in.RunID, in.RecordID, in.Trial, status, record, formatTime(now), started)
			if isForeignKey(err) {
				return fmt.Errorf("run %s: %w", in.RunID, ErrNotFound)
			}
			if err != nil {
				return err
			}
		case err != nil:
			return err
		case start:
			if status != TrialPending && status != TrialRunning {
				return fmt.Errorf("trial %s is already %s; reset it before running it again", id, status)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE trials SET status = ?, started_at = ? WHERE id = ?", TrialRunning, formatTime(now), id); err != nil {
				return err
			}
		}
		t, err = s.getTrial(ctx, tx, id)
		return err
	})
	return t, err
}

// FinishTrial records how a trial attempt ended, whatever its lease: it is
// for tools and embedded mode's recorder. A leaseholder uses Complete,
// which is fenced.
func (s *Store) FinishTrial(ctx context.Context, id string, r TrialResult) error {
	vals, err := s.resultValues(ctx, r)
	if err != nil {
		return fmt.Errorf("finishing trial %s: %w", id, err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE trials SET "+resultSet+" WHERE id = ?", append(vals, id)...)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("finishing trial %s: %w", id, err)
	}
	return nil
}

// resultSet is the SET clause recording a TrialResult; resultValues are
// its parameters.
const resultSet = `status = ?, passed = ?, error_kind = ?, error = ?, output = ?, output_blob = ?, isolation = ?,
	input_tokens = ?, output_tokens = ?, cost_usd = ?, spend_input_tokens = ?, spend_output_tokens = ?, spend_cost_usd = ?,
	finished_at = ?`

// resultValues validates and redacts a result, moving a large output to a
// blob.
func (s *Store) resultValues(ctx context.Context, r TrialResult) ([]any, error) {
	if r.Status != TrialFinished && r.Status != TrialErrored {
		return nil, fmt.Errorf("status %q is not %s or %s", r.Status, TrialFinished, TrialErrored)
	}
	iso, err := nullJSON("isolation report", s.redact.json(r.Isolation))
	if err != nil {
		return nil, err
	}
	r.Output, r.Error, r.ErrorKind = s.redact.text(r.Output), s.redact.text(r.Error), s.redact.text(r.ErrorKind)
	// An errored attempt has no verdict: an infrastructure failure is never
	// a score.
	var passed any
	if r.Passed != nil && r.Status == TrialFinished {
		passed = boolInt(*r.Passed)
	}
	var output, outputBlob any = r.Output, nil
	if len(r.Output) > InlineLimit {
		d, err := s.PutBlob(ctx, []byte(r.Output))
		if err != nil {
			return nil, fmt.Errorf("storing its output: %w", err)
		}
		output, outputBlob = nil, d
	}
	return []any{r.Status, passed, r.ErrorKind, r.Error, output, outputBlob, iso,
		r.Usage.InputTokens, r.Usage.OutputTokens, r.CostUSD,
		r.SpendUsage.InputTokens, r.SpendUsage.OutputTokens, r.SpendCostUSD, formatTime(time.Now())}, nil
}

// ResetTrial prepares a trial attempt for a rerun in place: deletes its
// events, scores and artifacts, clears its result and lease, bumps Attempt
// and sets it pending. Blobs are left in place (other rows may share them).
// It returns the trial as reset.
//
// Deprecated: use the Queue; a retry there is a new attempt row
// (Complete with Retry), which keeps the failed attempt's trajectory.
func (s *Store) ResetTrial(ctx context.Context, id string) (Trial, error) {
	var t Trial
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, table := range []string{"events", "scores", "artifacts", "evaluations"} {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE trial_id = ?", id); err != nil {
				return fmt.Errorf("deleting %s: %w", table, err)
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE trials SET attempt = attempt + 1, status = ?, passed = NULL,
			error_kind = '', error = '', output = NULL, output_blob = NULL, isolation = NULL,
			input_tokens = 0, output_tokens = 0, cost_usd = 0, started_at = NULL, finished_at = NULL,
			lease_owner = '', lease_until = NULL
			WHERE id = ?`, TrialPending, id)
		if err != nil {
			return err
		}
		if err := mustAffect(res); err != nil {
			return err
		}
		t, err = s.getTrial(ctx, tx, id)
		return err
	})
	if err != nil {
		return Trial{}, fmt.Errorf("resetting trial %s: %w", id, err)
	}
	return t, nil
}

// GetTrial returns the trial with this id or unique id prefix.
func (s *Store) GetTrial(ctx context.Context, id string) (Trial, error) {
	full, err := lookupByPrefix(ctx, s.db, "trials", "trial", id)
	if err != nil {
		return Trial{}, err
	}
	t, err := s.getTrial(ctx, s.db, full)
	if err != nil {
		return Trial{}, fmt.Errorf("reading trial %s: %w", full, err)
	}
	return t, nil
}

func (s *Store) getTrial(ctx context.Context, q querier, id string) (Trial, error) {
	ts, err := s.queryTrials(ctx, q, "WHERE id = ?", id)
	if err != nil {
		return Trial{}, err
	}
	if len(ts) == 0 {
		return Trial{}, fmt.Errorf("trial %s: %w", id, ErrNotFound)
	}
	return ts[0], nil
}

// currentAttempt keeps only rows that are their trial's highest attempt
// (the UNIQUE (run_id, record_id, trial, attempt) index answers it).
const currentAttempt = `NOT EXISTS (SELECT 1 FROM trials later WHERE later.run_id = trials.run_id
	AND later.record_id = trials.record_id AND later.trial = trials.trial AND later.attempt > trials.attempt)`

// ListTrials returns the current (highest) attempt of every trial of a
// run, in enqueue order. A run that does not exist is ErrNotFound.
func (s *Store) ListTrials(ctx context.Context, runID string) ([]Trial, error) {
	ts, err := s.queryTrials(ctx, s.db, "WHERE run_id = ? AND "+currentAttempt+" ORDER BY seq, record_id, trial", runID)
	if err == nil && len(ts) == 0 {
		err = s.runExists(ctx, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("listing trials of run %s: %w", runID, err)
	}
	return ts, nil
}

// ListAttempts returns every attempt of every trial of a run, in enqueue
// order and then attempt order. A run that does not exist is ErrNotFound.
func (s *Store) ListAttempts(ctx context.Context, runID string) ([]Trial, error) {
	ts, err := s.queryTrials(ctx, s.db, "WHERE run_id = ? ORDER BY seq, record_id, trial, attempt", runID)
	if err == nil && len(ts) == 0 {
		err = s.runExists(ctx, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("listing attempts of run %s: %w", runID, err)
	}
	return ts, nil
}

// CountTrials counts the run's trials (their current attempts) by status.
// A run that does not exist is ErrNotFound.
func (s *Store) CountTrials(ctx context.Context, runID string) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, count(*) FROM trials WHERE run_id = ? AND "+currentAttempt+" GROUP BY status", runID)
	if err != nil {
		return nil, fmt.Errorf("counting trials of run %s: %w", runID, err)
	}
	defer rows.Close()
	n := map[string]int{}
	for rows.Next() {
		var status string
		var c int
		if err := rows.Scan(&status, &c); err != nil {
			return nil, fmt.Errorf("counting trials of run %s: %w", runID, err)
		}
		n[status] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting trials of run %s: %w", runID, err)
	}
	if len(n) == 0 {
		if err := s.runExists(ctx, runID); err != nil {
			return nil, fmt.Errorf("counting trials of run %s: %w", runID, err)
		}
	}
	return n, nil
}

// UnfinishedTrials lists a run's trials whose current attempt is pending or
// running, in enqueue order.
//
// Deprecated: use the Queue (ListTrials, CountTrials); kept while
// events_test.go and store_test.go still call it.
func (s *Store) UnfinishedTrials(ctx context.Context, runID string) ([]Trial, error) {
	ts, err := s.queryTrials(ctx, s.db, "WHERE run_id = ? AND status IN (?, ?) AND "+currentAttempt+" ORDER BY seq, record_id, trial",
		runID, TrialPending, TrialRunning)
	if err == nil && len(ts) == 0 {
		err = s.runExists(ctx, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("listing unfinished trials of run %s: %w", runID, err)
	}
	return ts, nil
}

func (s *Store) runExists(ctx context.Context, runID string) error {
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM runs WHERE id = ?", runID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (s *Store) queryTrials(ctx context.Context, q querier, where string, args ...any) ([]Trial, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+trialColumns+" FROM trials "+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ts []Trial
	for rows.Next() {
		var (
			t                          Trial
			passed                     sql.NullInt64
			record, output, outputBlob sql.NullString
			iso                        sql.NullString
			created, started, finished sql.NullString
			leaseUntil                 sql.NullString
		)
		if err := rows.Scan(&t.ID, &t.RunID, &t.RecordID, &t.Trial, &t.Attempt, &t.Status, &passed, &t.ErrorKind, &t.Error,
			&record, &output, &outputBlob, &iso, &t.Usage.InputTokens, &t.Usage.OutputTokens, &t.CostUSD,
			&t.SpendUsage.InputTokens, &t.SpendUsage.OutputTokens, &t.SpendCostUSD,
			&t.RetriesUsed, &t.LeaseOwner, &leaseUntil, &t.LeaseEpoch,
			&created, &started, &finished); err != nil {
			return nil, err
		}
		if passed.Valid {
			p := passed.Int64 == 1
			t.Passed = &p
		}
		t.Record = rawJSON(record)
		t.Isolation = rawJSON(iso)
		t.Output = output.String
		t.OutputBlob = outputBlob.String
		for _, f := range []struct {
			dst *time.Time
			src sql.NullString
		}{{&t.CreatedAt, created}, {&t.StartedAt, started}, {&t.FinishedAt, finished}, {&t.LeaseUntil, leaseUntil}} {
			if *f.dst, err = parseTime(f.src); err != nil {
				return nil, err
			}
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Read large outputs after the rows are closed: a blob read must not hold
	// a pooled connection.
	rows.Close()
	for i := range ts {
		if ts[i].OutputBlob == "" {
			continue
		}
		b, err := s.GetBlob(ctx, ts[i].OutputBlob)
		if err != nil {
			return nil, fmt.Errorf("reading the output of trial %s: %w", ts[i].ID, err)
		}
		ts[i].Output = string(b)
	}
	return ts, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

const trialColumns = `id, run_id, record_id, trial, attempt, status, passed, error_kind, error, record,
	output, output_blob, isolation, input_tokens, output_tokens, cost_usd,
	spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lease_owner, lease_until, lease_epoch,
	created_at, started_at, finished_at`

// currentAttempt keeps a trial's highest attempt: within a run, seq names
// the trial, so the current attempt is the first row per seq in this order.
const currentAttempt = "DISTINCT ON (seq)"

// GetTrial returns the attempt with this id or unique id prefix.
func (s *Store) GetTrial(ctx context.Context, id string) (store.Trial, error) {
	full, err := lookupByPrefix(ctx, s.pool, "trials", "trial", id)
	if err != nil {
		return store.Trial{}, err
	}
	t, err := s.getTrial(ctx, s.pool, full)
	if err != nil {
		return store.Trial{}, fmt.Errorf("reading trial %s: %w", full, err)
	}
	return t, nil
}

func (s *Store) getTrial(ctx context.Context, q querier, id string) (store.Trial, error) {
	ts, err := s.queryTrials(ctx, q, "SELECT "+trialColumns+" FROM trials WHERE id = $1", id)
	if err != nil {
		return store.Trial{}, err
	}
	if len(ts) == 0 {
		return store.Trial{}, fmt.Errorf("trial %s: %w", id, store.ErrNotFound)
	}
	return ts[0], nil
}

// ListTrials returns the current (highest) attempt of every trial of a run,
// in enqueue order. A run that does not exist is ErrNotFound.
func (s *Store) ListTrials(ctx context.Context, runID string) ([]store.Trial, error) {
	ts, err := s.queryTrials(ctx, s.pool, "SELECT "+currentAttempt+" "+trialColumns+
		" FROM trials WHERE run_id = $1 ORDER BY seq, attempt DESC", pgText(runID))
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
func (s *Store) ListAttempts(ctx context.Context, runID string) ([]store.Trial, error) {
	ts, err := s.queryTrials(ctx, s.pool, "SELECT "+trialColumns+" FROM trials WHERE run_id = $1 ORDER BY seq, attempt", pgText(runID))
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
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM (
			SELECT `+currentAttempt+` status FROM trials WHERE run_id = $1 ORDER BY seq, attempt DESC
		) current GROUP BY status`, pgText(runID))
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

func (s *Store) runExists(ctx context.Context, runID string) error {
	var one int
	err := s.pool.QueryRow(ctx, "SELECT 1 FROM runs WHERE id = $1", pgText(runID)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

func (s *Store) queryTrials(ctx context.Context, q querier, query string, args ...any) ([]store.Trial, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	ts, err := scanTrials(rows)
	if err != nil {
		return nil, err
	}
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

// scanTrials reads rows of trialColumns (outputs in blobs not yet read).
func scanTrials(rows pgx.Rows) ([]store.Trial, error) {
	defer rows.Close()
	var ts []store.Trial
	for rows.Next() {
		var (
			t                  store.Trial
			record, iso        []byte
			output, outputBlob *string
			leaseUntil         *time.Time
			created            time.Time
			started, finished  *time.Time
		)
		if err := rows.Scan(&t.ID, &t.RunID, &t.RecordID, &t.Trial, &t.Attempt, &t.Status, &t.Passed, &t.ErrorKind, &t.Error,
			&record, &output, &outputBlob, &iso, &t.Usage.InputTokens, &t.Usage.OutputTokens, &t.CostUSD,
			&t.SpendUsage.InputTokens, &t.SpendUsage.OutputTokens, &t.SpendCostUSD,
			&t.RetriesUsed, &t.LeaseOwner, &leaseUntil, &t.LeaseEpoch,
			&created, &started, &finished); err != nil {
			return nil, err
		}
		if record != nil {
			t.Record = json.RawMessage(record)
		}
		if iso != nil {
			t.Isolation = json.RawMessage(iso)
		}
		if output != nil {
			t.Output = *output
		}
		if outputBlob != nil {
			t.OutputBlob = *outputBlob
		}
		t.LeaseUntil = utc(leaseUntil)
		t.CreatedAt, t.StartedAt, t.FinishedAt = created.UTC(), utc(started), utc(finished)
		ts = append(ts, t)
	}
	return ts, rows.Err()
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// PutEvaluations stores a trial's per-evaluator results (a JSON list, as the
// engine aggregates them), replacing earlier ones. ResetTrial deletes them.
func (s *Store) PutEvaluations(ctx context.Context, trialID string, results json.RawMessage) error {
	if !json.Valid(results) {
		return fmt.Errorf("storing evaluations of trial %s: not valid JSON", trialID)
	}
	results = s.redact.json(results)
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO evaluations (trial_id, results) VALUES (?, ?)
			ON CONFLICT (trial_id) DO UPDATE SET results = excluded.results`, trialID, string(results))
		if isForeignKey(err) {
			return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("storing evaluations of trial %s: %w", trialID, err)
	}
	return nil
}

// Evaluations returns the stored per-evaluator results of every trial of a
// run that has them, keyed by trial id.
func (s *Store) Evaluations(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT trial_id, results FROM evaluations WHERE trial_id IN (SELECT id FROM trials WHERE run_id = ?)", runID)
	if err != nil {
		return nil, fmt.Errorf("reading evaluations of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var id, res string
		if err := rows.Scan(&id, &res); err != nil {
			return nil, fmt.Errorf("reading evaluations of run %s: %w", runID, err)
		}
		out[id] = json.RawMessage(res)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading evaluations of run %s: %w", runID, err)
	}
	return out, nil
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
)

// Score is one named score of a trial.
type Score struct {
	Name  string
	Value float64
	// Details is evaluator-specific JSON (reasons, per-dimension marks); may
	// be nil.
	Details json.RawMessage
}

// PutScores stores scores of a trial in one transaction, replacing scores of
// the same name.
func (s *Store) PutScores(ctx context.Context, trialID string, scores []Score) error {
	details := make([]any, len(scores))
	for i, sc := range scores {
		if sc.Name == "" {
			return fmt.Errorf("storing scores of trial %s: score %d has no name", trialID, i)
		}
		if math.IsNaN(sc.Value) {
			return fmt.Errorf("storing scores of trial %s: score %q is NaN", trialID, sc.Name)
		}
		d, err := nullJSON("details of score "+sc.Name, s.redact.json(sc.Details))
		if err != nil {
			return fmt.Errorf("storing scores of trial %s: %w", trialID, err)
		}
		details[i] = d
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for i, sc := range scores {
			_, err := tx.ExecContext(ctx, `INSERT INTO scores (trial_id, name, value, details) VALUES (?, ?, ?, ?)
				ON CONFLICT (trial_id, name) DO UPDATE SET value = excluded.value, details = excluded.details`,
				trialID, sc.Name, sc.Value, details[i])
			if isForeignKey(err) {
				return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("score %q: %w", sc.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storing scores of trial %s: %w", trialID, err)
	}
	return nil
}

// TrialScores returns a trial's scores by name.
func (s *Store) TrialScores(ctx context.Context, trialID string) ([]Score, error) {
	m, err := s.scores(ctx, "WHERE trial_id = ?", trialID)
	if err != nil {
		return nil, fmt.Errorf("reading scores of trial %s: %w", trialID, err)
	}
	return m[trialID], nil
}

// Scores returns the scores of every trial of a run, keyed by trial id, each
// list by name. Trials without scores are absent.
func (s *Store) Scores(ctx context.Context, runID string) (map[string][]Score, error) {
	m, err := s.scores(ctx, "WHERE trial_id IN (SELECT id FROM trials WHERE run_id = ?)", runID)
	if err != nil {
		return nil, fmt.Errorf("reading scores of run %s: %w", runID, err)
	}
	return m, nil
}

func (s *Store) scores(ctx context.Context, where string, arg any) (map[string][]Score, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT trial_id, name, value, details FROM scores "+where+" ORDER BY trial_id, name", arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string][]Score{}
	for rows.Next() {
		var (
			trialID string
			sc      Score
			details sql.NullString
		)
		if err := rows.Scan(&trialID, &sc.Name, &sc.Value, &details); err != nil {
			return nil, err
		}
		sc.Details = rawJSON(details)
		m[trialID] = append(m[trialID], sc)
	}
	return m, rows.Err()
}

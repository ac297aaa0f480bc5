package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

// scoreRow is a validated, redacted score ready to insert.
type scoreRow struct {
	name    string
	value   float64
	details any
}

func (s *Store) scoreRows(scores []store.Score) ([]scoreRow, error) {
	out := make([]scoreRow, len(scores))
	for i, sc := range scores {
		if sc.Name == "" {
			return nil, fmt.Errorf("score %d has no name", i)
		}
		if math.IsNaN(sc.Value) {
			return nil, fmt.Errorf("score %q is NaN", sc.Name)
		}
		d, err := s.nullJSON("details of score "+sc.Name, sc.Details)
		if err != nil {
			return nil, err
		}
		out[i] = scoreRow{name: pgText(sc.Name), value: sc.Value, details: d}
	}
	return out, nil
}

func insertScores(ctx context.Context, tx pgx.Tx, trialID string, rows []scoreRow) error {
	for _, r := range rows {
		_, err := tx.Exec(ctx, `INSERT INTO scores (trial_id, name, value, details) VALUES ($1, $2, $3, $4)
			ON CONFLICT (trial_id, name) DO UPDATE SET value = excluded.value, details = excluded.details`,
			trialID, r.name, r.value, r.details)
		if isForeignKey(err) {
			return fmt.Errorf("trial %s: %w", trialID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("score %q: %w", r.name, err)
		}
	}
	return nil
}

// PutScores stores scores of an attempt in one transaction, replacing
// scores of the same name.
func (s *Store) PutScores(ctx context.Context, trialID string, scores []store.Score) error {
	rows, err := s.scoreRows(scores)
	if err != nil {
		return fmt.Errorf("storing scores of trial %s: %w", trialID, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return insertScores(ctx, tx, pgText(trialID), rows) })
	if err != nil {
		return fmt.Errorf("storing scores of trial %s: %w", trialID, err)
	}
	return nil
}

// TrialScores returns an attempt's scores by name.
func (s *Store) TrialScores(ctx context.Context, trialID string) ([]store.Score, error) {
	m, err := s.scores(ctx, "WHERE trial_id = $1", pgText(trialID))
	if err != nil {
		return nil, fmt.Errorf("reading scores of trial %s: %w", trialID, err)
	}
	return m[trialID], nil
}

// Scores returns the scores of every attempt of a run, keyed by attempt
// (trial) id, each list by name; as the SQLite store, every attempt's,
// though only a run's current attempts normally have any.
func (s *Store) Scores(ctx context.Context, runID string) (map[string][]store.Score, error) {
	m, err := s.scores(ctx, "WHERE trial_id IN (SELECT id FROM trials WHERE run_id = $1)", pgText(runID))
	if err != nil {
		return nil, fmt.Errorf("reading scores of run %s: %w", runID, err)
	}
	return m, nil
}

func (s *Store) scores(ctx context.Context, where string, arg any) (map[string][]store.Score, error) {
	rows, err := s.pool.Query(ctx, "SELECT trial_id, name, value, details FROM scores "+where+" ORDER BY trial_id, name", arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string][]store.Score{}
	for rows.Next() {
		var (
			trialID string
			sc      store.Score
			details []byte
		)
		if err := rows.Scan(&trialID, &sc.Name, &sc.Value, &details); err != nil {
			return nil, err
		}
		if details != nil {
			sc.Details = json.RawMessage(details)
		}
		m[trialID] = append(m[trialID], sc)
	}
	return m, rows.Err()
}

// PutEvaluations stores an attempt's per-evaluator results (a JSON list),
// replacing earlier ones.
func (s *Store) PutEvaluations(ctx context.Context, trialID string, results json.RawMessage) error {
	if !json.Valid(results) {
		return fmt.Errorf("storing evaluations of trial %s: not valid JSON", trialID)
	}
	err := putEvaluations(ctx, s.pool, pgText(trialID), string(s.json(results)))
	if err != nil {
		return fmt.Errorf("storing evaluations of trial %s: %w", trialID, err)
	}
	return nil
}

func putEvaluations(ctx context.Context, q querier, trialID, results string) error {
	_, err := q.Exec(ctx, `INSERT INTO evaluations (trial_id, results) VALUES ($1, $2)
		ON CONFLICT (trial_id) DO UPDATE SET results = excluded.results`, trialID, results)
	if isForeignKey(err) {
		return fmt.Errorf("trial %s: %w", trialID, store.ErrNotFound)
	}
	return err
}

// Evaluations returns the stored per-evaluator results of every attempt of
// a run that has them, keyed by attempt (trial) id.
func (s *Store) Evaluations(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	rows, err := s.pool.Query(ctx, "SELECT trial_id, results FROM evaluations WHERE trial_id IN (SELECT id FROM trials WHERE run_id = $1)", pgText(runID))
	if err != nil {
		return nil, fmt.Errorf("reading evaluations of run %s: %w", runID, err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var id string
		var res []byte
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

// PutArtifact streams r, redacted, into a blob and records it as the
// attempt's artifact name, replacing an artifact of the same name.
func (s *Store) PutArtifact(ctx context.Context, trialID, name, mediaType string, r io.Reader) (store.Artifact, error) {
	if name == "" {
		return store.Artifact{}, fmt.Errorf("storing artifact of trial %s: empty name", trialID)
	}
	d, size, err := s.PutBlobReader(ctx, r)
	if err != nil {
		return store.Artifact{}, fmt.Errorf("storing artifact %s of trial %s: %w", name, trialID, err)
	}
	a := store.Artifact{TrialID: trialID, Name: s.text(name), Digest: d, Size: size, MediaType: s.text(mediaType)}
	if err := putArtifact(ctx, s.pool, a); err != nil {
		return store.Artifact{}, fmt.Errorf("storing artifact %s of trial %s: %w", name, trialID, err)
	}
	return a, nil
}

func putArtifact(ctx context.Context, q querier, a store.Artifact) error {
	_, err := q.Exec(ctx, `INSERT INTO artifacts (trial_id, name, digest, size, media_type) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (trial_id, name) DO UPDATE SET digest = excluded.digest, size = excluded.size, media_type = excluded.media_type`,
		pgText(a.TrialID), a.Name, a.Digest, a.Size, a.MediaType)
	if isForeignKey(err) {
		return fmt.Errorf("trial %s: %w", a.TrialID, store.ErrNotFound)
	}
	return err
}

// Artifacts lists an attempt's artifacts by name; read one with OpenBlob.
func (s *Store) Artifacts(ctx context.Context, trialID string) ([]store.Artifact, error) {
	rows, err := s.pool.Query(ctx, "SELECT trial_id, name, digest, size, media_type FROM artifacts WHERE trial_id = $1 ORDER BY name", pgText(trialID))
	if err != nil {
		return nil, fmt.Errorf("listing artifacts of trial %s: %w", trialID, err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Artifact, error) {
		var a store.Artifact
		err := r.Scan(&a.TrialID, &a.Name, &a.Digest, &a.Size, &a.MediaType)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing artifacts of trial %s: %w", trialID, err)
	}
	return as, nil
}

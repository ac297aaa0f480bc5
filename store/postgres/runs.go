package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

const runColumns = "id, name, spec, spec_path, status, created_at, finished_at, summary, error, project, max_running, dataset_version"

func validRunStatus(s string) bool {
	switch s {
	case store.RunRunning, store.RunCompleted, store.RunInterrupted, store.RunFailed, store.RunCancelled:
		return true
	}
	return false
}

// CreateRun records a new run in status running.
func (s *Store) CreateRun(ctx context.Context, in store.RunInput) (store.Run, error) {
	specJSON := []byte("{}")
	if in.Spec != nil {
		b, err := json.Marshal(in.Spec)
		if err != nil {
			return store.Run{}, fmt.Errorf("creating run: encoding spec: %w", err)
		}
		specJSON = s.json(b)
		if in.Name == "" {
			in.Name = in.Spec.Name
		}
	}
	if in.ID != "" {
		if err := validID(in.ID); err != nil {
			return store.Run{}, fmt.Errorf("creating run: %w", err)
		}
	}
	if in.MaxRunning < 0 {
		return store.Run{}, fmt.Errorf("creating run: max running %d is negative (0 means no cap)", in.MaxRunning)
	}
	// Microseconds: what the database keeps, so the run returned equals
	// the run read back.
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := store.Run{
		Name:           s.text(in.Name),
		Spec:           specJSON,
		SpecPath:       s.text(in.SpecPath),
		Status:         store.RunRunning,
		CreatedAt:      now,
		Project:        pgText(in.Project),
		MaxRunning:     in.MaxRunning,
		DatasetVersion: s.text(in.DatasetVersion),
	}
	// A generated id collides only if two runs start in the same second and
	// draw the same 24 random bits; try again then.
	for try := 0; ; try++ {
		r.ID = in.ID
		if r.ID == "" {
			r.ID = newID("r", now)
		}
		_, err := s.pool.Exec(ctx, "INSERT INTO runs ("+runColumns+") VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL, '', $7, $8, $9)",
			r.ID, r.Name, string(r.Spec), r.SpecPath, r.Status, r.CreatedAt, r.Project, r.MaxRunning, r.DatasetVersion)
		if err == nil {
			return r, nil
		}
		if isUniqueViolation(err) && in.ID == "" && try < 5 {
			continue
		}
		if isUniqueViolation(err) {
			return store.Run{}, fmt.Errorf("creating run %s: a run with this id already exists", r.ID)
		}
		return store.Run{}, fmt.Errorf("creating run %s: %w", r.ID, err)
	}
}

// FinishRun ends a run with a terminal status (completed, interrupted,
// failed or cancelled), a summary snapshot (may be nil) and an error
// message (may be ""). A cancelled run stays cancelled whatever status is
// given (see store.RunCancelled).
func (s *Store) FinishRun(ctx context.Context, id, status string, summary json.RawMessage, errMsg string) error {
	if !validRunStatus(status) || status == store.RunRunning {
		return fmt.Errorf("finishing run %s: status %q is not one of %s, %s, %s, %s", id, status, store.RunCompleted, store.RunInterrupted, store.RunFailed, store.RunCancelled)
	}
	sum, err := s.nullJSON("summary", summary)
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", id, err)
	}
	tag, err := s.pool.Exec(ctx, "UPDATE runs SET status = CASE status WHEN $6 THEN status ELSE $1 END, finished_at = $2, summary = $3, error = $4 WHERE id = $5",
		status, time.Now().UTC(), sum, s.text(errMsg), pgText(id), store.RunCancelled)
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("finishing run %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// ResumeRun puts a run back in status running for resume: clears its finish
// time and error, keeps its summary until the next FinishRun. id may be a
// unique prefix.
func (s *Store) ResumeRun(ctx context.Context, id string) (store.Run, error) {
	var r store.Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		full, err := lookupByPrefix(ctx, tx, "runs", "run", id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE runs SET status = $1, finished_at = NULL, error = '' WHERE id = $2", store.RunRunning, full); err != nil {
			return err
		}
		r, err = getRun(ctx, tx, full)
		return err
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("resuming run %s: %w", id, err)
	}
	return r, nil
}

// GetRun returns the run with this id or unique id prefix.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	full, err := lookupByPrefix(ctx, s.pool, "runs", "run", id)
	if err != nil {
		return store.Run{}, err
	}
	r, err := getRun(ctx, s.pool, full)
	if err != nil {
		return store.Run{}, fmt.Errorf("reading run %s: %w", full, err)
	}
	return r, nil
}

func getRun(ctx context.Context, q querier, id string) (store.Run, error) {
	rows, err := q.Query(ctx, "SELECT "+runColumns+" FROM runs WHERE id = $1", id)
	if err != nil {
		return store.Run{}, err
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return store.Run{}, err
	}
	if len(runs) == 0 {
		return store.Run{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return runs[0], nil
}

// ListRuns lists runs newest first.
func (s *Store) ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if opt.Status != "" {
		if !validRunStatus(opt.Status) {
			return nil, fmt.Errorf("listing runs: unknown status %q", opt.Status)
		}
		where = append(where, "status = "+arg(opt.Status))
	}
	if opt.Name != "" {
		where = append(where, "name = "+arg(pgText(opt.Name)))
	}
	if opt.Project != "" {
		where = append(where, "project = "+arg(pgText(opt.Project)))
	}
	if opt.Before != "" {
		var created time.Time
		err := s.pool.QueryRow(ctx, "SELECT created_at FROM runs WHERE id = $1", pgText(opt.Before)).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("listing runs before %s: %w", opt.Before, store.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("listing runs before %s: %w", opt.Before, err)
		}
		where = append(where, "(created_at, id) < ("+arg(created)+", "+arg(opt.Before)+")")
	}
	q := "SELECT " + runColumns + " FROM runs"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if opt.Limit > 0 {
		q += " LIMIT " + arg(opt.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return runs, nil
}

func scanRuns(rows pgx.Rows) ([]store.Run, error) {
	defer rows.Close()
	var runs []store.Run
	for rows.Next() {
		var (
			r             store.Run
			spec, summary []byte
			created       time.Time
			finished      *time.Time
		)
		if err := rows.Scan(&r.ID, &r.Name, &spec, &r.SpecPath, &r.Status, &created, &finished, &summary, &r.Error,
			&r.Project, &r.MaxRunning, &r.DatasetVersion); err != nil {
			return nil, err
		}
		r.Spec = json.RawMessage(spec)
		if summary != nil {
			r.Summary = json.RawMessage(summary)
		}
		r.CreatedAt, r.FinishedAt = created.UTC(), utc(finished)
		runs = append(runs, r)
	}
	return runs, rows.Err()
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"evals.si/spec"
)

// Run statuses. A run is running until FinishRun (or CancelRun: see
// RunCancelled); a process that dies leaves it running, which resume treats
// like interrupted.
const (
	RunRunning     = "running"
	RunCompleted   = "completed"
	RunInterrupted = "interrupted"
	RunFailed      = "failed"
)

// Run is one evaluation run.
type Run struct {
	ID   string
	Name string
	// Spec is the run spec as JSON, exactly as it was run; DecodeSpec reads it.
	Spec     json.RawMessage
	SpecPath string
	Status   string
	// CreatedAt is when the run was created; FinishedAt is zero while running.
	CreatedAt  time.Time
	FinishedAt time.Time
	// Summary is the snapshot FinishRun stored (aggregate scores etc.); nil
	// until then. Per-trial data stays the source of truth.
	Summary json.RawMessage
	Error   string
	// Project owns the run on a server ("" in embedded mode).
	Project string
	// MaxRunning caps the run's attempts leased at once (0: no cap).
	MaxRunning int
	// DatasetVersion identifies the dataset the run used (a content digest
	// of a datasets_dir file, a run id, ...), "" when not known.
	DatasetVersion string
}

// DecodeSpec parses the stored spec.
func (r Run) DecodeSpec() (*spec.Spec, error) {
	var s spec.Spec
	if err := json.Unmarshal(r.Spec, &s); err != nil {
		return nil, fmt.Errorf("decoding the spec of run %s: %w", r.ID, err)
	}
	return &s, nil
}

// RunInput creates a run.
type RunInput struct {
	// ID is optional; by default a sortable id like r-20261129-085301-ab12cd
	// is generated.
	ID string
	// Name defaults to Spec.Name.
	Name     string
	Spec     *spec.Spec
	SpecPath string
	// Project, MaxRunning and DatasetVersion are stored as given (see Run).
	Project        string
	MaxRunning     int
	DatasetVersion string
}

// ListRunsOptions filters and pages ListRuns. Runs come newest first.
type ListRunsOptions struct {
	// Limit caps the number of runs; 0 means no limit.
	Limit int
	// Status, when set, keeps runs in that status.
	Status string
	// Name, when set, keeps runs with exactly that name.
	Name string
	// Project, when set, keeps runs of that project.
	Project string
	// Before, when set, is a run id: only runs listed after it (older) are
	// returned. Pass the last id of a page to get the next page.
	Before string
}

const runColumns = "id, name, spec, spec_path, status, created_at, finished_at, summary, error, project, max_running, dataset_version"

func validRunStatus(s string) bool {
	switch s {
	case RunRunning, RunCompleted, RunInterrupted, RunFailed, RunCancelled:
		return true
	}
	return false
}

// CreateRun records a new run in status running.
func (s *Store) CreateRun(ctx context.Context, in RunInput) (Run, error) {
	specJSON := []byte("{}")
	if in.Spec != nil {
		b, err := json.Marshal(in.Spec)
		if err != nil {
			return Run{}, fmt.Errorf("creating run: encoding spec: %w", err)
		}
		specJSON = s.redact.json(b)
		if in.Name == "" {
			in.Name = in.Spec.Name
		}
	}
	if in.ID != "" {
		if err := validID(in.ID); err != nil {
			return Run{}, fmt.Errorf("creating run: %w", err)
		}
	}
	if in.MaxRunning < 0 {
		return Run{}, fmt.Errorf("creating run: max running %d is negative (0 means no cap)", in.MaxRunning)
	}
	now := time.Now().UTC()
	in.Name, in.SpecPath = s.redact.text(in.Name), s.redact.text(in.SpecPath)
	r := Run{
		Name:           in.Name,
		Spec:           specJSON,
		SpecPath:       in.SpecPath,
		Status:         RunRunning,
		CreatedAt:      now,
		Project:        in.Project,
		MaxRunning:     in.MaxRunning,
		DatasetVersion: s.redact.text(in.DatasetVersion),
	}
	// A generated id collides only if two runs start in the same second and
	// draw the same 24 random bits; try again then.
	for try := 0; ; try++ {
		r.ID = in.ID
		if r.ID == "" {
			r.ID = newID("r", now)
		}
		err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO runs ("+runColumns+") VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, '', ?, ?, ?)",
				r.ID, r.Name, string(r.Spec), r.SpecPath, r.Status, formatTime(r.CreatedAt), r.Project, r.MaxRunning, r.DatasetVersion)
			return err
		})
		if err == nil {
			return r, nil
		}
		if isUniqueViolation(err) && in.ID == "" && try < 5 {
			continue
		}
		if isUniqueViolation(err) {
			return Run{}, fmt.Errorf("creating run %s: a run with this id already exists", r.ID)
		}
		return Run{}, fmt.Errorf("creating run %s: %w", r.ID, err)
	}
}

// FinishRun ends a run with a terminal status (completed, interrupted,
// failed or cancelled), a summary snapshot (may be nil) and an error
// message (may be ""). A cancelled run stays cancelled whatever status is
// given: a finalizer that read the run just before CancelRun does not undo
// it.
func (s *Store) FinishRun(ctx context.Context, id, status string, summary json.RawMessage, errMsg string) error {
	if !validRunStatus(status) || status == RunRunning {
		return fmt.Errorf("finishing run %s: status %q is not one of %s, %s, %s, %s", id, status, RunCompleted, RunInterrupted, RunFailed, RunCancelled)
	}
	errMsg = s.redact.text(errMsg)
	sum, err := nullJSON("summary", s.redact.json(summary))
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", id, err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE runs SET status = CASE status WHEN ?1 THEN ?1 ELSE ?2 END, finished_at = ?3, summary = ?4, error = ?5 WHERE id = ?6",
			RunCancelled, status, formatTime(time.Now()), sum, errMsg, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("finishing run %s: %w", id, err)
	}
	return nil
}

// ResumeRun puts a run back in status running for resume: clears its finish
// time and error, keeps its summary until the next FinishRun. id may be a
// unique prefix. It returns the run as updated.
func (s *Store) ResumeRun(ctx context.Context, id string) (Run, error) {
	var r Run
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		full, err := lookupByPrefix(ctx, tx, "runs", "run", id)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE runs SET status = ?, finished_at = NULL, error = '' WHERE id = ?", RunRunning, full); err != nil {
			return err
		}
		r, err = getRun(ctx, tx, full)
		return err
	})
	if err != nil {
		return Run{}, fmt.Errorf("resuming run %s: %w", id, err)
	}
	return r, nil
}

// GetRun returns the run with this id or unique id prefix. A missing run is
// ErrNotFound, a prefix of several runs ErrAmbiguous.
func (s *Store) GetRun(ctx context.Context, id string) (Run, error) {
	full, err := lookupByPrefix(ctx, s.db, "runs", "run", id)
	if err != nil {
		return Run{}, err
	}
	r, err := getRun(ctx, s.db, full)
	if err != nil {
		return Run{}, fmt.Errorf("reading run %s: %w", full, err)
	}
	return r, nil
}

func getRun(ctx context.Context, q querier, id string) (Run, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+runColumns+" FROM runs WHERE id = ?", id)
	if err != nil {
		return Run{}, err
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return Run{}, err
	}
	if len(runs) == 0 {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	return runs[0], nil
}

// ListRuns lists runs newest first.
func (s *Store) ListRuns(ctx context.Context, opt ListRunsOptions) ([]Run, error) {
	var where []string
	var args []any
	if opt.Status != "" {
		if !validRunStatus(opt.Status) {
			return nil, fmt.Errorf("listing runs: unknown status %q", opt.Status)
		}
		where = append(where, "status = ?")
		args = append(args, opt.Status)
	}
	if opt.Name != "" {
		where = append(where, "name = ?")
		args = append(args, opt.Name)
	}
	if opt.Project != "" {
		where = append(where, "project = ?")
		args = append(args, opt.Project)
	}
	if opt.Before != "" {
		var created string
		err := s.db.QueryRowContext(ctx, "SELECT created_at FROM runs WHERE id = ?", opt.Before).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("listing runs before %s: %w", opt.Before, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("listing runs before %s: %w", opt.Before, err)
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, created, created, opt.Before)
	}
	q := "SELECT " + runColumns + " FROM runs"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if opt.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, opt.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return runs, nil
}

func scanRuns(rows *sql.Rows) ([]Run, error) {
	defer rows.Close()
	var runs []Run
	for rows.Next() {
		var (
			r                 Run
			spec              string
			created           sql.NullString
			finished, summary sql.NullString
		)
		if err := rows.Scan(&r.ID, &r.Name, &spec, &r.SpecPath, &r.Status, &created, &finished, &summary, &r.Error,
			&r.Project, &r.MaxRunning, &r.DatasetVersion); err != nil {
			return nil, err
		}
		r.Spec = json.RawMessage(spec)
		r.Summary = rawJSON(summary)
		var err error
		if r.CreatedAt, err = parseTime(created); err != nil {
			return nil, err
		}
		if r.FinishedAt, err = parseTime(finished); err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, rows.Err()
}

// validID accepts explicit run ids that are safe in URLs, file names and
// prefix lookups: 1 to 128 ASCII letters, digits, '.', '_' and '-', starting
// with a letter or digit.
func validID(id string) error {
	if len(id) > 128 {
		return fmt.Errorf("id %.20q… is longer than 128 characters", id)
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("id %q: use only letters, digits, '.', '_' and '-', starting with a letter or digit", id)
		}
	}
	return nil
}

// mustAffect turns an UPDATE or DELETE that touched no row into ErrNotFound;
// the caller's wrapping names what was missing.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

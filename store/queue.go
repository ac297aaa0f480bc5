package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"evals.si/trajectory"
)

// The trial queue (see Queue in backend.go). Every queue write is one
// group-committed transaction (write.go), and SQLite has one writer, so a
// fence checked inside it holds until the commit: no other lease, requeue
// or completion can come between the check and the writes it guards.

// Enqueue registers pending trials (attempt 1) of a run in the order given;
// trials the run already has are left as they are. A TrialInput's RunID may
// be empty; when set it must be runID.
func (s *Store) Enqueue(ctx context.Context, runID string, trials []TrialInput) error {
	records := make([]any, len(trials))
	for i, in := range trials {
		if in.RunID == "" {
			in.RunID = runID
		}
		if in.RunID != runID {
			return fmt.Errorf("enqueueing trials of run %s: trial %d belongs to run %s", runID, i, in.RunID)
		}
		if err := in.validate(); err != nil {
			return fmt.Errorf("enqueueing trials of run %s: trial %d: %w", runID, i, err)
		}
		rec, err := nullJSON("record", s.redact.json(in.Record))
		if err != nil {
			return fmt.Errorf("enqueueing trials of run %s: trial %d (%s): %w", runID, i, in, err)
		}
		records[i] = rec
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var runStatus string
		err := tx.QueryRowContext(ctx, "SELECT status FROM runs WHERE id = ?", runID).Scan(&runStatus)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		var seq int
		if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) FROM trials WHERE run_id = ?", runID).Scan(&seq); err != nil {
			return err
		}
		now := time.Now()
		// Trials of a cancelled run (cancelled while it was being
		// submitted) are born cancelled: none may wait for a lease that
		// never comes.
		status, finished := TrialPending, any(nil)
		if runStatus == RunCancelled {
			status, finished = TrialCancelled, formatTime(now)
		}
		for i, in := range trials {
			var one int
			err := tx.QueryRowContext(ctx, "SELECT 1 FROM trials WHERE run_id = ? AND record_id = ? AND trial = ? LIMIT 1",
				runID, in.RecordID, in.Trial).Scan(&one)
			if err == nil {
				continue // already enqueued (or already run): idempotent
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			seq++
			err = insertWithNewID(ctx, tx, now, `INSERT INTO trials (id, run_id, record_id, trial, attempt, seq, status, record, created_at, finished_at)
				VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)`,
				runID, in.RecordID, in.Trial, seq, status, records[i], formatTime(now), finished)
			if err != nil {
				return fmt.Errorf("trial %d (%s): %w", i, in, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("enqueueing %d trials of run %s: %w", len(trials), runID, err)
	}
	return nil
}

// Lease claims the first pending attempt of the oldest running run that
// has one and is below its MaxRunning (counted as its running attempts).
func (s *Store) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	if req.TTL <= 0 {
		return Lease{}, fmt.Errorf("leasing a trial for worker %q: the lease TTL %v is not positive", req.Worker, req.TTL)
	}
	// Idle workers poll: answer "nothing" from a read, without taking the
	// writer slot. The transaction below looks again.
	if _, err := pickRun(ctx, s.db, req); err != nil {
		return Lease{}, fmt.Errorf("leasing a trial for worker %q: %w", req.Worker, err)
	}
	var l Lease
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		runID, err := pickRun(ctx, tx, req)
		if err != nil {
			return err
		}
		var id string
		if err := s.stmts.queryRow(ctx, tx, "SELECT id FROM trials WHERE status = 'pending' AND run_id = ? ORDER BY seq, attempt LIMIT 1",
			runID).Scan(&id); err != nil {
			return err
		}
		var epoch int64
		if err := s.stmts.queryRow(ctx, tx, "UPDATE lease_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch").Scan(&epoch); err != nil {
			return fmt.Errorf("taking a lease epoch: %w", err)
		}
		now := time.Now()
		until := now.Add(req.TTL)
		if _, err := s.stmts.exec(ctx, tx, `UPDATE trials SET status = 'running', lease_owner = ?, lease_until = ?, lease_epoch = ?,
			started_at = ? WHERE id = ?`, s.redact.text(req.Worker), formatTime(until), epoch, formatTime(now), id); err != nil {
			return err
		}
		t, err := s.getTrial(ctx, tx, id)
		if err != nil {
			return err
		}
		l = Lease{TrialID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt,
			RetriesUsed: t.RetriesUsed, Epoch: epoch, Worker: t.LeaseOwner, Until: t.LeaseUntil,
			Record: t.Record, SpendUsage: t.SpendUsage, SpendCostUSD: t.SpendCostUSD}
		return nil
	})
	if err != nil {
		return Lease{}, fmt.Errorf("leasing a trial for worker %q: %w", req.Worker, err)
	}
	return l, nil
}

// pickRun returns the run to lease from, or ErrNoWork.
func pickRun(ctx context.Context, q querier, req LeaseRequest) (string, error) {
	query := `SELECT r.id FROM runs r WHERE r.status = 'running'`
	var args []any
	for _, f := range []struct {
		column string
		values []string
	}{{"r.id", req.Runs}, {"r.project", req.Projects}} {
		if len(f.values) == 0 {
			continue
		}
		query += " AND " + f.column + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(f.values)), ", ") + ")"
		for _, v := range f.values {
			args = append(args, v)
		}
	}
	query += ` AND EXISTS (SELECT 1 FROM trials t WHERE t.status = 'pending' AND t.run_id = r.id)
		AND (r.max_running = 0 OR (SELECT count(*) FROM trials t WHERE t.status = 'running' AND t.run_id = r.id) < r.max_running)
		ORDER BY r.created_at, r.id LIMIT 1`
	var id string
	err := q.QueryRowContext(ctx, query, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNoWork
	}
	return id, err
}

// Heartbeat extends the lease to now+ttl while it holds. A lease past its
// end that no Requeue has taken back yet still holds: nobody else has the
// attempt.
func (s *Store) Heartbeat(ctx context.Context, l Lease, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 {
		return time.Time{}, fmt.Errorf("extending the lease on trial %s: the TTL %v is not positive", l.TrialID, ttl)
	}
	until := time.Now().Add(ttl)
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.stmts.exec(ctx, tx, "UPDATE trials SET lease_until = ? WHERE id = ? AND status = 'running' AND lease_epoch = ? AND lease_epoch > 0",
			formatTime(until), l.TrialID, l.Epoch)
		if err != nil {
			return err
		}
		return mustAffectLease(ctx, tx, res, l)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("extending the lease on trial %s: %w", l.TrialID, err)
	}
	// The stored time has nanosecond precision, so this is what reads back.
	return until.UTC(), nil
}

// fence fails with ErrLeaseLost unless the attempt is running under l.
func (s *Store) fence(ctx context.Context, tx *sql.Tx, l Lease) error {
	var one int
	err := s.stmts.queryRow(ctx, tx, "SELECT 1 FROM trials WHERE id = ? AND status = 'running' AND lease_epoch = ? AND lease_epoch > 0",
		l.TrialID, l.Epoch).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return leaseLost(ctx, tx, l)
	}
	return err
}

// mustAffectLease turns a fenced UPDATE that matched no row into the
// reason the lease no longer holds.
func mustAffectLease(ctx context.Context, tx *sql.Tx, res sql.Result, l Lease) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return leaseLost(ctx, tx, l)
	}
	return nil
}

// leaseLost describes why l no longer holds, wrapping ErrLeaseLost.
func leaseLost(ctx context.Context, tx *sql.Tx, l Lease) error {
	var status, owner string
	var epoch int64
	err := tx.QueryRowContext(ctx, "SELECT status, lease_owner, lease_epoch FROM trials WHERE id = ?", l.TrialID).Scan(&status, &owner, &epoch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("the attempt does not exist: %w", ErrLeaseLost)
	case err != nil:
		return err
	case status == TrialCancelled:
		return fmt.Errorf("the attempt was cancelled (lease epoch %d, this lease %d): %w", epoch, l.Epoch, ErrCancelled)
	case status != TrialRunning:
		return fmt.Errorf("the attempt is %s (lease epoch %d, this lease %d): %w", status, epoch, l.Epoch, ErrLeaseLost)
	default:
		return fmt.Errorf("the attempt is leased to %q under epoch %d, not epoch %d: %w", owner, epoch, l.Epoch, ErrLeaseLost)
	}
}

// AppendLeased appends events to the leased attempt, checking the lease in
// the same transaction as the inserts.
func (s *Store) AppendLeased(ctx context.Context, l Lease, evs []trajectory.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows, err := s.eventRows(ctx, l.TrialID, evs)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.fence(ctx, tx, l); err != nil {
			return err
		}
		return s.insertEventRows(ctx, tx, l.TrialID, rows)
	})
	if err != nil {
		return fmt.Errorf("appending %d events to leased trial %s: %w", len(evs), l.TrialID, err)
	}
	return nil
}

// eventRow is an event ready to insert: redacted, large payloads in blobs.
type eventRow struct {
	seq          int
	kind, time   string
	inline, blob any
}

// eventRows prepares events for insertion (the rules of AppendEvent).
func (s *Store) eventRows(ctx context.Context, trialID string, evs []trajectory.Event) ([]eventRow, error) {
	rows := make([]eventRow, len(evs))
	for i, e := range evs {
		if e.Kind == "" {
			return nil, fmt.Errorf("appending events to trial %s: event %d has no kind", trialID, i)
		}
		if e.Seq < 0 {
			return nil, fmt.Errorf("appending events to trial %s: negative seq %d", trialID, e.Seq)
		}
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		e.Time = e.Time.UTC()
		payload, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("appending %s event to trial %s: encoding it: %w", e.Kind, trialID, err)
		}
		payload = s.redact.json(payload)
		r := eventRow{seq: e.Seq, kind: string(e.Kind), time: formatTime(e.Time), inline: string(payload)}
		if len(payload) > InlineLimit {
			d, err := s.PutBlob(ctx, payload)
			if err != nil {
				return nil, fmt.Errorf("appending %s event to trial %s: storing its payload: %w", e.Kind, trialID, err)
			}
			r.inline, r.blob = nil, d
		}
		rows[i] = r
	}
	return rows, nil
}

// insertEventRows inserts prepared events; zero seqs are numbered after
// the trial's last.
func (s *Store) insertEventRows(ctx context.Context, tx *sql.Tx, trialID string, rows []eventRow) error {
	next := 0
	for _, r := range rows {
		seq := r.seq
		if seq == 0 {
			if next == 0 {
				if err := s.stmts.queryRow(ctx, tx, "SELECT coalesce(max(seq), 0) + 1 FROM events WHERE trial_id = ?", trialID).Scan(&next); err != nil {
					return err
				}
			}
			seq = next
		}
		next = max(next, seq+1)
		_, err := s.stmts.exec(ctx, tx, "INSERT INTO events (trial_id, seq, kind, time, payload, payload_blob) VALUES (?, ?, ?, ?, ?, ?)",
			trialID, seq, r.kind, r.time, r.inline, r.blob)
		switch {
		case isForeignKey(err):
			return fmt.Errorf("trial %s: %w", trialID, ErrNotFound)
		case isUniqueViolation(err):
			return fmt.Errorf("seq %d is already recorded", seq)
		case err != nil:
			return err
		}
	}
	return nil
}

// Complete records how the leased attempt ended, all in one transaction:
// its result, scores, evaluations, artifacts and, with Retry, the next
// attempt. A completion naming a score or an artifact twice is refused
// (and nothing of it is stored). Artifact bytes are stored as blobs first;
// a blob no row names is harmless, blobs being content-addressed.
func (s *Store) Complete(ctx context.Context, l Lease, c Completion) error {
	if err := s.complete(ctx, l, c); err != nil {
		return fmt.Errorf("completing leased trial %s: %w", l.TrialID, err)
	}
	return nil
}

func (s *Store) complete(ctx context.Context, l Lease, c Completion) error {
	if c.Retry && c.Result.Status != TrialErrored {
		return fmt.Errorf("a retry needs an errored result, not %q", c.Result.Status)
	}
	result, err := s.resultValues(ctx, c.Result)
	if err != nil {
		return err
	}
	details := make([]any, len(c.Scores))
	for i, sc := range c.Scores {
		if sc.Name == "" {
			return fmt.Errorf("score %d has no name", i)
		}
		if math.IsNaN(sc.Value) {
			return fmt.Errorf("score %q is NaN", sc.Name)
		}
		if details[i], err = nullJSON("details of score "+sc.Name, s.redact.json(sc.Details)); err != nil {
			return err
		}
	}
	var evaluations any
	if len(c.Evaluations) > 0 {
		if evaluations, err = nullJSON("evaluations", s.redact.json(c.Evaluations)); err != nil {
			return err
		}
	}
	artifacts := make([]Artifact, len(c.Artifacts))
	for i, a := range c.Artifacts {
		if a.Name == "" {
			return fmt.Errorf("artifact %d has no name", i)
		}
		d, size, err := s.PutBlobReader(ctx, bytes.NewReader(a.Data))
		if err != nil {
			return fmt.Errorf("storing artifact %s: %w", a.Name, err)
		}
		artifacts[i] = Artifact{TrialID: l.TrialID, Name: a.Name, Digest: d, Size: size, MediaType: a.MediaType}
	}

	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.stmts.exec(ctx, tx, "UPDATE trials SET "+resultSet+" WHERE id = ? AND status = 'running' AND lease_epoch = ? AND lease_epoch > 0",
			append(result, l.TrialID, l.Epoch)...)
		if err != nil {
			return err
		}
		if err := mustAffectLease(ctx, tx, res, l); err != nil {
			return err
		}
		for i, sc := range c.Scores {
			_, err := s.stmts.exec(ctx, tx, "INSERT INTO scores (trial_id, name, value, details) VALUES (?, ?, ?, ?)",
				l.TrialID, sc.Name, sc.Value, details[i])
			if isUniqueViolation(err) {
				return fmt.Errorf("score %q is given twice", sc.Name)
			}
			if err != nil {
				return fmt.Errorf("score %q: %w", sc.Name, err)
			}
		}
		if evaluations != nil {
			if _, err := s.stmts.exec(ctx, tx, "INSERT INTO evaluations (trial_id, results) VALUES (?, ?)", l.TrialID, evaluations); err != nil {
				return fmt.Errorf("evaluations: %w", err)
			}
		}
		for _, a := range artifacts {
			_, err := s.stmts.exec(ctx, tx, "INSERT INTO artifacts (trial_id, name, digest, size, media_type) VALUES (?, ?, ?, ?, ?)",
				a.TrialID, a.Name, a.Digest, a.Size, a.MediaType)
			if isUniqueViolation(err) {
				return fmt.Errorf("artifact %q is given twice", a.Name)
			}
			if err != nil {
				return fmt.Errorf("artifact %q: %w", a.Name, err)
			}
		}
		if c.Retry {
			// The errored attempt's spend (every attempt's so far) carries over.
			return insertNextAttempt(ctx, tx, l.TrialID, 1, 0)
		}
		return nil
	})
}

// insertNextAttempt inserts attempt+1 of the trial of attempt id, pending,
// with its record, seq and spend, and retries_used and lost_count raised by
// the given amounts.
func insertNextAttempt(ctx context.Context, tx *sql.Tx, id string, retried, lost int) error {
	now := time.Now()
	err := insertWithNewID(ctx, tx, now, `INSERT INTO trials (id, run_id, record_id, trial, attempt, seq, status, record,
			spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lost_count, created_at)
		SELECT ?1, run_id, record_id, trial, attempt + 1, seq, 'pending', record,
			spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used + ?2, lost_count + ?3, ?4
		FROM trials WHERE id = ?5`, retried, lost, formatTime(now), id)
	if err != nil {
		return fmt.Errorf("adding the next attempt: %w", err)
	}
	return nil
}

// insertWithNewID runs an INSERT of a trial row whose first parameter is
// its id, drawing a new id when the last one is taken: ids have 24 random
// bits per second, and a large Enqueue makes thousands in one second.
func insertWithNewID(ctx context.Context, tx *sql.Tx, now time.Time, query string, args ...any) error {
	for try := 0; ; try++ {
		_, err := tx.ExecContext(ctx, query, append([]any{newID("t", now)}, args...)...)
		if err != nil && isPrimaryKeyViolation(err) && try < 10 {
			continue
		}
		return err
	}
}

// Requeue takes back running attempts (see Queue.Requeue). A lost
// attempt's events stay with it; its error names the worker that held it.
func (s *Store) Requeue(ctx context.Context, req RequeueRequest) ([]Trial, error) {
	what := "expired leases"
	where, args := "status = 'running' AND lease_until < ?", []any{formatTime(req.Expired)}
	switch {
	case req.All && req.RunID == "":
		return nil, errors.New("requeueing every running attempt: name the run (RequeueRequest.RunID)")
	case req.All:
		what = "running attempts of run " + req.RunID
		where, args = "status = 'running' AND run_id = ?", []any{req.RunID}
	case req.Expired.IsZero():
		return nil, errors.New("requeueing expired leases: RequeueRequest.Expired is not set")
	case req.RunID != "":
		what += " of run " + req.RunID
		where += " AND run_id = ?"
		args = append(args, req.RunID)
	}
	var out []Trial
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		taken, err := s.queryTrials(ctx, tx, "WHERE "+where+" ORDER BY lease_until, id", args...)
		if err != nil {
			return err
		}
		now := formatTime(time.Now())
		for _, t := range taken {
			var lost int
			if err := tx.QueryRowContext(ctx, "SELECT lost_count FROM trials WHERE id = ?", t.ID).Scan(&lost); err != nil {
				return err
			}
			ended := "its lease ended at " + formatTime(t.LeaseUntil)
			if t.LeaseUntil.IsZero() {
				ended = "it held no lease"
			}
			status, msg := TrialLost, fmt.Sprintf("worker %q did not finish the attempt: %s", t.LeaseOwner, ended)
			if lost >= MaxLost {
				status = TrialErrored
				msg = fmt.Sprintf("the trial lost %d attempts, more than %d: the last, by worker %q, did not finish: %s",
					lost+1, MaxLost, t.LeaseOwner, ended)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE trials SET status = ?, error_kind = 'lease', error = ?, finished_at = ? WHERE id = ?",
				status, s.redact.text(msg), now, t.ID); err != nil {
				return err
			}
			if status == TrialLost {
				if err := insertNextAttempt(ctx, tx, t.ID, 0, 1); err != nil {
					return err
				}
			}
			back, err := s.getTrial(ctx, tx, t.ID)
			if err != nil {
				return err
			}
			out = append(out, back)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("requeueing %s: %w", what, err)
	}
	return out, nil
}

func isPrimaryKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

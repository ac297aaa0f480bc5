package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

// The trial queue (see store.Queue). Leasers claim with FOR UPDATE SKIP
// LOCKED, so they never wait for each other; every leaseholder write locks
// the attempt's row with its fence (id, lease_epoch, status running) in the
// transaction that writes, so a Requeue either comes before it (and the
// write finds no row: ErrLeaseLost, nothing kept) or after it.

// Enqueue registers pending trials (attempt 1) of a run in the order given;
// trials the run already has are left as they are. A TrialInput's RunID may
// be empty; when set it must be runID. The new rows go in one statement,
// whatever their number.
func (s *Store) Enqueue(ctx context.Context, runID string, trials []store.TrialInput) error {
	type trialKey struct {
		record string
		trial  int
	}
	keys := make([]trialKey, len(trials))
	records := make([]*string, len(trials))
	for i, in := range trials {
		if in.RunID == "" {
			in.RunID = runID
		}
		if in.RunID != runID {
			return fmt.Errorf("enqueueing trials of run %s: trial %d belongs to run %s", runID, i, in.RunID)
		}
		if in.RecordID == "" {
			return fmt.Errorf("enqueueing trials of run %s: trial %d: record id is empty", runID, i)
		}
		if in.Trial < 0 {
			return fmt.Errorf("enqueueing trials of run %s: trial %d: trial index %d is negative", runID, i, in.Trial)
		}
		rec, err := s.nullJSON("record", in.Record)
		if err != nil {
			return fmt.Errorf("enqueueing trials of run %s: trial %d (record %q): %w", runID, i, in.RecordID, err)
		}
		if rec != nil {
			r := rec.(string)
			records[i] = &r
		}
		keys[i] = trialKey{pgText(in.RecordID), in.Trial}
	}
	runID = pgText(runID)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The run's row lock orders Enqueues of one run, which number
		// seqs, and orders them with CancelRun: trials enqueued into a
		// cancelled run (cancelled while it was being submitted) are born
		// cancelled, so none waits for a lease that never comes.
		var status string
		err := tx.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1 FOR NO KEY UPDATE", runID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var seq int64
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(seq), 0) FROM trials WHERE run_id = $1", runID).Scan(&seq); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT record_id, trial FROM trials WHERE run_id = $1 AND attempt = 1", runID)
		if err != nil {
			return err
		}
		have := map[trialKey]bool{}
		var row trialKey
		if _, err := pgx.ForEachRow(rows, []any{&row.record, &row.trial}, func() error { have[row] = true; return nil }); err != nil {
			return err
		}
		type newTrial struct {
			id, record string
			trial, seq int64
			json       *string
		}
		var fresh []newTrial
		now := time.Now().UTC()
		trialStatus, finished := store.TrialPending, (*time.Time)(nil)
		if status == store.RunCancelled {
			trialStatus, finished = store.TrialCancelled, &now
		}
		// Ids unique within the statement: a row whose id another row of
		// it took would be skipped, and its id reported as inserted.
		drawn := map[string]bool{}
		draw := func() string {
			for {
				if id := newID("t", now); !drawn[id] {
					drawn[id] = true
					return id
				}
			}
		}
		for i, k := range keys {
			if have[k] {
				continue // already enqueued (or already run): idempotent
			}
			have[k] = true
			seq++
			fresh = append(fresh, newTrial{id: draw(), record: k.record, trial: int64(k.trial), seq: seq, json: records[i]})
		}
		// One INSERT of them all; rows whose id turns out to be taken (24
		// random bits per second: likely among thousands) go again with
		// new ids.
		for try := 0; len(fresh) > 0; try++ {
			if try == 10 {
				return errors.New("no free trial ids after 10 draws")
			}
			var (
				ids, recs    []string
				trials, seqs []int64
				recJSON      []*string
			)
			for _, f := range fresh {
				ids, recs, trials, seqs, recJSON = append(ids, f.id), append(recs, f.record), append(trials, f.trial), append(seqs, f.seq), append(recJSON, f.json)
			}
			rows, err := tx.Query(ctx, `INSERT INTO trials (id, run_id, record_id, trial, attempt, seq, status, record, created_at, finished_at)
				SELECT u.id, $1, u.record_id, u.trial, 1, u.seq, $8::text, u.record::json, $2, $9::timestamptz
				FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS u(id, record_id, trial, seq, record)
				ON CONFLICT (id) DO NOTHING RETURNING id`, runID, now, ids, recs, trials, seqs, recJSON, trialStatus, finished)
			if err != nil {
				return err
			}
			inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			done := map[string]bool{}
			for _, id := range inserted {
				done[id] = true
			}
			again := fresh[:0]
			for _, f := range fresh {
				if !done[f.id] {
					f.id = draw()
					again = append(again, f)
				}
			}
			fresh = again
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("enqueueing %d trials of run %s: %w", len(trials), runID, err)
	}
	return nil
}

// insertWithNewID runs an INSERT … ON CONFLICT (id) DO NOTHING of a trial
// row whose first parameter is its id, drawing a new id while the last one
// is taken: ids have 24 random bits per second, and a large Enqueue makes
// thousands in one second.
func insertWithNewID(ctx context.Context, tx pgx.Tx, now time.Time, query string, args ...any) error {
	for range 10 {
		tag, err := tx.Exec(ctx, query, append([]any{newID("t", now)}, args...)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
	}
	return errors.New("no free trial id after 10 draws")
}

// Lease claims the first pending attempt of the oldest running run that
// has one and is below its MaxRunning (counted as its running attempts).
func (s *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	if req.TTL <= 0 {
		return store.Lease{}, fmt.Errorf("leasing a trial for worker %q: the lease TTL %v is not positive", req.Worker, req.TTL)
	}
	// full lists capped runs found at their cap in an earlier round.
	var full []string
	for {
		l, capped, err := s.tryLease(ctx, req, full)
		if err != nil {
			return store.Lease{}, fmt.Errorf("leasing a trial for worker %q: %w", req.Worker, err)
		}
		if capped == "" {
			return l, nil
		}
		full = append(full, capped)
	}
}

// tryLease claims one attempt, or names the capped run whose cap a
// concurrent lease reached first (then the caller asks again without it).
func (s *Store) tryLease(ctx context.Context, req store.LeaseRequest, full []string) (l store.Lease, capped string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			id, runID  string
			maxRunning int
		)
		// The cap test here reads a snapshot; for a capped run it is
		// repeated under the run's row lock below, which every leaser of
		// that run takes, so concurrent leases cannot overshoot it.
		err := tx.QueryRow(ctx, `SELECT t.id, t.run_id, r.max_running
			FROM trials t JOIN runs r ON r.id = t.run_id
			WHERE t.status = 'pending' AND r.status = 'running'
				AND (cardinality($1::text[]) = 0 OR r.id = ANY ($1))
				AND (cardinality($2::text[]) = 0 OR r.project = ANY ($2))
				AND NOT (r.id = ANY ($3))
				AND (r.max_running = 0 OR
					(SELECT count(*) FROM trials x WHERE x.status = 'running' AND x.run_id = r.id) < r.max_running)
			ORDER BY r.created_at, r.id, t.seq, t.attempt
			LIMIT 1
			FOR UPDATE OF t SKIP LOCKED`,
			nonNil(req.Runs), nonNil(req.Projects), nonNil(full)).Scan(&id, &runID, &maxRunning)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNoWork
		}
		if err != nil {
			return err
		}
		if maxRunning > 0 {
			if _, err := tx.Exec(ctx, "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE", runID); err != nil {
				return err
			}
			var running int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM trials WHERE status = 'running' AND run_id = $1", runID).Scan(&running); err != nil {
				return err
			}
			if running >= maxRunning {
				capped = runID
				return nil
			}
		}
		now := time.Now().UTC()
		rows, err := tx.Query(ctx, `UPDATE trials SET status = 'running', lease_owner = $2, lease_until = $3,
				lease_epoch = nextval('lease_epoch'), started_at = $4
			WHERE id = $1 RETURNING `+trialColumns, id, s.text(req.Worker), now.Add(req.TTL), now)
		if err != nil {
			return err
		}
		ts, err := scanTrials(rows)
		if err != nil {
			return err
		}
		if len(ts) != 1 {
			return fmt.Errorf("claiming trial %s: the row is gone", id)
		}
		t := ts[0]
		l = store.Lease{TrialID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt,
			RetriesUsed: t.RetriesUsed, Epoch: t.LeaseEpoch, Worker: t.LeaseOwner, Until: t.LeaseUntil,
			Record: t.Record, SpendUsage: t.SpendUsage, SpendCostUSD: t.SpendCostUSD}
		return nil
	})
	return l, capped, err
}

// nonNil makes a nil list an empty array (a NULL array has no
// cardinality), its strings ones PostgreSQL can hold.
func nonNil(v []string) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = pgText(x)
	}
	return out
}

// Heartbeat extends the lease to now+ttl while it holds.
func (s *Store) Heartbeat(ctx context.Context, l store.Lease, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 {
		return time.Time{}, fmt.Errorf("extending the lease on trial %s: the TTL %v is not positive", l.TrialID, ttl)
	}
	var until time.Time
	err := s.pool.QueryRow(ctx, `UPDATE trials SET lease_until = $3
		WHERE id = $1 AND lease_epoch = $2 AND status = 'running' AND lease_epoch > 0 RETURNING lease_until`,
		pgText(l.TrialID), l.Epoch, time.Now().UTC().Add(ttl)).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.leaseLost(ctx, s.pool, l)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extending the lease on trial %s: %w", l.TrialID, err)
	}
	return until.UTC(), nil
}

// leaseLost describes why l no longer holds, wrapping ErrLeaseLost.
func (s *Store) leaseLost(ctx context.Context, q querier, l store.Lease) error {
	var status, owner string
	var epoch int64
	err := q.QueryRow(ctx, "SELECT status, lease_owner, lease_epoch FROM trials WHERE id = $1", pgText(l.TrialID)).Scan(&status, &owner, &epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("the attempt does not exist: %w", store.ErrLeaseLost)
	case err != nil:
		return err
	case status == store.TrialCancelled:
		return fmt.Errorf("the attempt was cancelled (lease epoch %d, this lease %d): %w", epoch, l.Epoch, store.ErrCancelled)
	case status != store.TrialRunning:
		return fmt.Errorf("the attempt is %s (lease epoch %d, this lease %d): %w", status, epoch, l.Epoch, store.ErrLeaseLost)
	default:
		return fmt.Errorf("the attempt is leased to %q under epoch %d, not epoch %d: %w", owner, epoch, l.Epoch, store.ErrLeaseLost)
	}
}

// Complete records how the leased attempt ended, all in one transaction:
// its result, scores, evaluations, artifacts and, with Retry, the next
// attempt. A completion naming a score or an artifact twice is refused
// (and nothing of it is stored). Artifact bytes are stored as blobs first;
// a blob no row names is harmless, blobs being content-addressed.
func (s *Store) Complete(ctx context.Context, l store.Lease, c store.Completion) error {
	if err := s.complete(ctx, l, c); err != nil {
		return fmt.Errorf("completing leased trial %s: %w", l.TrialID, err)
	}
	return nil
}

func (s *Store) complete(ctx context.Context, l store.Lease, c store.Completion) error {
	if c.Retry && c.Result.Status != store.TrialErrored {
		return fmt.Errorf("a retry needs an errored result, not %q", c.Result.Status)
	}
	result, err := s.resultValues(ctx, c.Result)
	if err != nil {
		return err
	}
	scores, err := s.scoreRows(c.Scores)
	if err != nil {
		return err
	}
	var evaluations any
	if len(c.Evaluations) > 0 {
		if evaluations, err = s.nullJSON("evaluations", c.Evaluations); err != nil {
			return err
		}
	}
	artifacts := make([]store.Artifact, len(c.Artifacts))
	for i, a := range c.Artifacts {
		if a.Name == "" {
			return fmt.Errorf("artifact %d has no name", i)
		}
		d, size, err := s.PutBlobReader(ctx, bytes.NewReader(a.Data))
		if err != nil {
			return fmt.Errorf("storing artifact %s: %w", a.Name, err)
		}
		artifacts[i] = store.Artifact{TrialID: l.TrialID, Name: s.text(a.Name), Digest: d, Size: size, MediaType: s.text(a.MediaType)}
	}

	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockTrial(ctx, tx, l.TrialID, &l); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE trials SET "+resultSet+" WHERE id = $15", append(result, l.TrialID)...); err != nil {
			return err
		}
		for _, sc := range scores {
			_, err := tx.Exec(ctx, "INSERT INTO scores (trial_id, name, value, details) VALUES ($1, $2, $3, $4)",
				l.TrialID, sc.name, sc.value, sc.details)
			if isUniqueViolation(err) {
				return fmt.Errorf("score %q is given twice", sc.name)
			}
			if err != nil {
				return fmt.Errorf("score %q: %w", sc.name, err)
			}
		}
		if evaluations != nil {
			if _, err := tx.Exec(ctx, "INSERT INTO evaluations (trial_id, results) VALUES ($1, $2)", l.TrialID, evaluations); err != nil {
				return fmt.Errorf("evaluations: %w", err)
			}
		}
		for _, a := range artifacts {
			_, err := tx.Exec(ctx, "INSERT INTO artifacts (trial_id, name, digest, size, media_type) VALUES ($1, $2, $3, $4, $5)",
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

// resultSet is the SET clause recording a TrialResult ($1…$14);
// resultValues are its parameters.
const resultSet = `status = $1, passed = $2, error_kind = $3, error = $4, output = $5, output_blob = $6, isolation = $7,
	input_tokens = $8, output_tokens = $9, cost_usd = $10, spend_input_tokens = $11, spend_output_tokens = $12,
	spend_cost_usd = $13, finished_at = $14`

// resultValues validates and redacts a result, moving a large output to a
// blob.
func (s *Store) resultValues(ctx context.Context, r store.TrialResult) ([]any, error) {
	if r.Status != store.TrialFinished && r.Status != store.TrialErrored {
		return nil, fmt.Errorf("status %q is not %s or %s", r.Status, store.TrialFinished, store.TrialErrored)
	}
	iso, err := s.nullJSON("isolation report", r.Isolation)
	if err != nil {
		return nil, err
	}
	if r.Status == store.TrialErrored {
		r.Passed = nil // errors are never verdicts, whatever the worker says
	}
	r.Output, r.Error, r.ErrorKind = s.text(r.Output), s.text(r.Error), s.text(r.ErrorKind)
	var output, outputBlob any = r.Output, nil
	if len(r.Output) > store.InlineLimit {
		d, err := s.PutBlob(ctx, []byte(r.Output))
		if err != nil {
			return nil, fmt.Errorf("storing its output: %w", err)
		}
		output, outputBlob = nil, d
	}
	return []any{r.Status, r.Passed, r.ErrorKind, r.Error, output, outputBlob, iso,
		r.Usage.InputTokens, r.Usage.OutputTokens, r.CostUSD,
		r.SpendUsage.InputTokens, r.SpendUsage.OutputTokens, r.SpendCostUSD, time.Now().UTC()}, nil
}

// insertNextAttempt inserts attempt+1 of the trial of attempt id, pending,
// with its record, seq and spend, and retries_used and lost_count raised by
// the given amounts.
func insertNextAttempt(ctx context.Context, tx pgx.Tx, id string, retried, lost int) error {
	now := time.Now().UTC()
	err := insertWithNewID(ctx, tx, now, `INSERT INTO trials (id, run_id, record_id, trial, attempt, seq, status, record,
			spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used, lost_count, created_at)
		SELECT $1, run_id, record_id, trial, attempt + 1, seq, 'pending', record,
			spend_input_tokens, spend_output_tokens, spend_cost_usd, retries_used + $2, lost_count + $3, $4
		FROM trials WHERE id = $5
		ON CONFLICT (id) DO NOTHING`, retried, lost, now, id)
	if err != nil {
		return fmt.Errorf("adding the next attempt: %w", err)
	}
	return nil
}

// Requeue takes back running attempts (see store.Queue.Requeue). A lost
// attempt's events stay with it; its error names the worker that held it.
func (s *Store) Requeue(ctx context.Context, req store.RequeueRequest) ([]store.Trial, error) {
	what := "expired leases"
	where, args := "status = 'running' AND lease_until < $1", []any{req.Expired.UTC()}
	switch {
	case req.All && req.RunID == "":
		return nil, errors.New("requeueing every running attempt: name the run (RequeueRequest.RunID)")
	case req.All:
		what = "running attempts of run " + req.RunID
		where, args = "status = 'running' AND run_id = $1", []any{pgText(req.RunID)}
	case req.Expired.IsZero():
		return nil, errors.New("requeueing expired leases: RequeueRequest.Expired is not set")
	case req.RunID != "":
		what += " of run " + req.RunID
		where += " AND run_id = $2"
		args = append(args, pgText(req.RunID))
	}
	var out []store.Trial
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Locked in id order, so two sweepers cannot deadlock; a row a
		// leaseholder is writing is waited for, then looked at again.
		rows, err := tx.Query(ctx, "SELECT id, lost_count FROM trials WHERE "+where+" ORDER BY id FOR UPDATE", args...)
		if err != nil {
			return err
		}
		type taken struct {
			id   string
			lost int
		}
		ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (taken, error) {
			var t taken
			err := r.Scan(&t.id, &t.lost)
			return t, err
		})
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		for _, tk := range ts {
			t, err := s.getTrial(ctx, tx, tk.id)
			if err != nil {
				return err
			}
			ended := "its lease ended at " + t.LeaseUntil.Format(time.RFC3339Nano)
			if t.LeaseUntil.IsZero() {
				ended = "it held no lease"
			}
			status, msg := store.TrialLost, fmt.Sprintf("worker %q did not finish the attempt: %s", t.LeaseOwner, ended)
			if tk.lost >= store.MaxLost {
				status = store.TrialErrored
				msg = fmt.Sprintf("the trial lost %d attempts, more than %d: the last, by worker %q, did not finish: %s",
					tk.lost+1, store.MaxLost, t.LeaseOwner, ended)
			}
			if _, err := tx.Exec(ctx, "UPDATE trials SET status = $1, error_kind = 'lease', error = $2, finished_at = $3 WHERE id = $4",
				status, s.text(msg), now, t.ID); err != nil {
				return err
			}
			if status == store.TrialLost {
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

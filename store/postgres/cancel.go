package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/store"
)

// CancelRun cancels a running run (see store.Queue.CancelRun); id may be a
// unique prefix. It returns the run as it is after.
func (s *Store) CancelRun(ctx context.Context, id string) (store.Run, error) {
	wait := 5 * time.Millisecond
	for try := 1; ; try++ {
		r, err := s.cancelRun(ctx, id)
		switch code := pgCode(err); {
		case err == nil:
			return r, nil
		case (code == "55P03" || code == "40P01") && try < cancelTries:
			// A lock the cancel waited for too long (see cancelRun), or
			// a deadlock: rolled back, it runs again in a moment.
			select {
			case <-ctx.Done():
				return store.Run{}, fmt.Errorf("cancelling run %s: %w", id, ctx.Err())
			case <-time.After(wait):
			}
			wait = min(2*wait, 200*time.Millisecond)
		default:
			return store.Run{}, fmt.Errorf("cancelling run %s: %w", id, err)
		}
	}
}

// cancelTries bounds how often a cancel that keeps meeting locks runs
// again (some seconds in all) before it gives up and says so.
const cancelTries = 40

// errNotRunning rolls back a cancel that found its run no longer running.
var errNotRunning = errors.New("the run is not running")

func (s *Store) cancelRun(ctx context.Context, id string) (store.Run, error) {
	full, err := lookupByPrefix(ctx, s.pool, "runs", "run", id)
	if err != nil {
		return store.Run{}, err
	}
	r, err := getRun(ctx, s.pool, full)
	if err != nil || r.Status != store.RunRunning {
		return r, err // unchanged: cancelled, finished or interrupted
	}
	now := time.Now().UTC()
	cancelTrials := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE trials SET status = $2, finished_at = $3 WHERE run_id = $1 AND status IN ($4, $5)",
			full, store.TrialCancelled, now, store.TrialPending, store.TrialRunning)
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The cancel locks rows other writers lock in other orders: a
		// requeue's next attempt or a retry's appears between the
		// statements below, leasers of a capped run lock their attempt
		// and then the run, Enqueue the run and then new attempts. So it
		// never waits long: a lock it waits for past lock_timeout fails
		// it (CancelRun runs it again), and it is always the cancel, not
		// the completion or the sweep it would deadlock with, that gives
		// way (PostgreSQL looks for deadlocks only after a second of
		// waiting, deadlock_timeout).
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '200ms'"); err != nil {
			return err
		}
		// The run's unfinished attempts are locked first, in id order (as
		// Requeue locks them), so a leaseholder's write in flight (a
		// completion, a retry's next attempt, a requeue's) ends before
		// the UPDATE after, a statement of its own, reads what it wrote.
		if _, err := tx.Exec(ctx, "SELECT id FROM trials WHERE run_id = $1 AND status IN ($2, $3) ORDER BY id FOR NO KEY UPDATE",
			full, store.TrialPending, store.TrialRunning); err != nil {
			return err
		}
		if err := cancelTrials(tx); err != nil {
			return err
		}
		// The run last: its row lock orders the cancel with Enqueue, and
		// a leaser of a capped run takes it after its attempt's.
		tag, err := tx.Exec(ctx, "UPDATE runs SET status = $2, finished_at = $3, summary = NULL, error = '' WHERE id = $1 AND status = $4",
			full, store.RunCancelled, now, store.RunRunning)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errNotRunning // it ended meanwhile: leave it as it ended
		}
		// What an Enqueue committed before the run's lock was ours.
		if err := cancelTrials(tx); err != nil {
			return err
		}
		r, err = getRun(ctx, tx, full)
		return err
	})
	if errors.Is(err, errNotRunning) {
		return getRun(ctx, s.pool, full)
	}
	return r, err
}

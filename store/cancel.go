package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Cancelling a run (Queue.CancelRun): the run and its unfinished attempts
// end as cancelled in one transaction. A cancelled attempt is neither a
// result nor an infrastructure error: summaries count it as neither passed,
// failed nor errored.
const (
	// RunCancelled is a run someone cancelled. It is final: FinishRun
	// records a cancelled run's summary but keeps its status.
	RunCancelled = "cancelled"
	// TrialCancelled is an attempt that was pending or running when its
	// run was cancelled. It never starts (or, running, its lease is over:
	// the worker's next write is refused with ErrCancelled).
	TrialCancelled = "cancelled"
)

// ErrCancelled is returned (wrapped) by a leaseholder's write when its
// attempt was cancelled with its run. It wraps ErrLeaseLost: the lease no
// longer holds, and whatever handles a lost lease (drop the attempt, report
// nothing more) handles it; errors.Is(err, ErrCancelled) says why.
var ErrCancelled error = cancelled{}

type cancelled struct{}

func (cancelled) Error() string { return "its run was cancelled" }
func (cancelled) Unwrap() error { return ErrLeaseLost }

// CancelRun cancels a running run (see Queue.CancelRun); id may be a unique
// prefix. It returns the run as it is after.
func (s *Store) CancelRun(ctx context.Context, id string) (Run, error) {
	var r Run
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		full, err := lookupByPrefix(ctx, tx, "runs", "run", id)
		if err != nil {
			return err
		}
		// One writer: no lease, completion or requeue comes between these
		// statements, so every attempt unfinished now is cancelled here.
		now := formatTime(time.Now())
		res, err := tx.ExecContext(ctx, "UPDATE runs SET status = ?, finished_at = ?, summary = NULL, error = '' WHERE id = ? AND status = ?",
			RunCancelled, now, full, RunRunning)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			if _, err := tx.ExecContext(ctx, "UPDATE trials SET status = ?, finished_at = ? WHERE run_id = ? AND status IN (?, ?)",
				TrialCancelled, now, full, TrialPending, TrialRunning); err != nil {
				return err
			}
		}
		r, err = getRun(ctx, tx, full)
		return err
	})
	if err != nil {
		return Run{}, fmt.Errorf("cancelling run %s: %w", id, err)
	}
	return r, nil
}

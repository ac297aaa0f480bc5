package remoteworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/engine"
	"evals.si/trajectory"
)

// ErrCancelled is wrapped by the worker queue's errors for an attempt whose
// run was cancelled on the server (POST /v1/runs/{id}/cancel). It is an
// engine.ErrLeaseLost, so the engine stops the attempt's context at once
// and records nothing of it.
var ErrCancelled = fmt.Errorf("the run was cancelled on the server: %w", engine.ErrLeaseLost)

// cancelQueue is the worker's queue with the server's cancellations made
// final: the first write of an attempt the server refuses because its run
// was cancelled (409 lease_lost, reason cancelled; usually the next
// heartbeat) ends the attempt, and every later write of it (the events
// still queued when the engine stops it) is refused here, without a word
// to the server: the worker reports nothing more of a cancelled attempt.
type cancelQueue struct {
	engine.Queue
	log *slog.Logger

	mu sync.Mutex
	// gone holds the cancelled attempts, by trial and epoch, with when the
	// server said so; an entry is dropped an hour later (the engine stops
	// writing to an attempt within seconds of being told).
	gone map[leaseKey]time.Time
}

func newCancelQueue(q engine.Queue, log *slog.Logger) *cancelQueue {
	return &cancelQueue{Queue: q, log: log, gone: map[leaseKey]time.Time{}}
}

// cancelled is ErrCancelled for the attempt of l.
func cancelled(l *engine.Lease, cause error) error {
	if cause == nil {
		return fmt.Errorf("trial %s (run %s): %w; nothing more of it is sent", l.TrialID, l.RunID, ErrCancelled)
	}
	return fmt.Errorf("trial %s (run %s): %w (%v)", l.TrialID, l.RunID, ErrCancelled, cause)
}

// refused reports whether the server said earlier that l's run was
// cancelled.
func (q *cancelQueue) refused(l *engine.Lease) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.gone[leaseKey{l.TrialID, l.Epoch}]
	return ok
}

// check turns the server's refusal of a cancelled attempt into
// ErrCancelled and remembers the attempt; other errors pass as they are.
func (q *cancelQueue) check(l *engine.Lease, err error) error {
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != "lease_lost" || ae.Reason != api.ReasonCancelled {
		return err
	}
	q.mu.Lock()
	_, seen := q.gone[leaseKey{l.TrialID, l.Epoch}]
	q.gone[leaseKey{l.TrialID, l.Epoch}] = time.Now()
	q.mu.Unlock()
	if !seen {
		q.log.Info("the run was cancelled on the server; the trial is stopped", "run", l.RunID, "trial", l.TrialID, "record", l.Record.ID)
	}
	return cancelled(l, err)
}

// Lease also forgets cancelled attempts told long ago.
func (q *cancelQueue) Lease(ctx context.Context, req engine.LeaseRequest) (*engine.Lease, error) {
	q.mu.Lock()
	for k, at := range q.gone {
		if time.Since(at) > time.Hour {
			delete(q.gone, k)
		}
	}
	q.mu.Unlock()
	return q.Queue.Lease(ctx, req)
}

func (q *cancelQueue) Heartbeat(ctx context.Context, l *engine.Lease) error {
	if q.refused(l) {
		return cancelled(l, nil)
	}
	return q.check(l, q.Queue.Heartbeat(ctx, l))
}

func (q *cancelQueue) AppendEvents(ctx context.Context, l *engine.Lease, evs []trajectory.Event) error {
	if q.refused(l) {
		return cancelled(l, nil)
	}
	return q.check(l, q.Queue.AppendEvents(ctx, l, evs))
}

func (q *cancelQueue) Finish(ctx context.Context, l *engine.Lease, o *engine.Outcome, retry bool) error {
	if q.refused(l) {
		return cancelled(l, nil)
	}
	return q.check(l, q.Queue.Finish(ctx, l, o, retry))
}

package telemetry

import (
	"context"
	"errors"

	"evals.si/engine"
	"evals.si/trajectory"
)

// tracedQueue is a worker's queue that also emits the spans of what goes
// through it. Spans are emitted only for what the queue accepted: events
// the store refused never become spans.
type tracedQueue struct {
	next engine.Queue
	r    *recorder
}

func (q *tracedQueue) Lease(ctx context.Context, req engine.LeaseRequest) (*engine.Lease, error) {
	l, err := q.next.Lease(ctx, req)
	if err == nil && l != nil {
		q.r.trialStarted(ctx, l.RunID, l.TrialID, l.Record, l.Trial, l.Attempt)
	}
	return l, err
}

func (q *tracedQueue) Heartbeat(ctx context.Context, l *engine.Lease) error {
	return q.next.Heartbeat(ctx, l)
}

func (q *tracedQueue) AppendEvents(ctx context.Context, l *engine.Lease, evs []trajectory.Event) error {
	if err := q.next.AppendEvents(ctx, l, evs); err != nil {
		return err
	}
	for _, e := range evs {
		q.r.event(l.TrialID, e)
	}
	return nil
}

func (q *tracedQueue) Finish(ctx context.Context, l *engine.Lease, o *engine.Outcome, retry bool) error {
	err := q.next.Finish(ctx, l, o, retry)
	switch {
	case errors.Is(err, engine.ErrLeaseLost):
		q.r.trialFinished(l.TrialID, nil, "lease lost: another attempt runs the trial")
	case err != nil:
		q.r.trialFinished(l.TrialID, nil, "the outcome could not be recorded")
	default:
		q.r.trialFinished(l.TrialID, o, "")
	}
	return err
}

package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"evals.si/trajectory"
)

// memQueue is a Queue in memory for the worker's unit tests: the store's
// queue (and its fencing) is tested against real databases in store and
// runqueue. Its event writes go to a batchRecorder.
type memQueue struct {
	rec *batchRecorder

	mu       sync.Mutex
	pending  []*Lease
	finished []*Outcome
	epoch    int64
}

func newMemQueue(rec *batchRecorder, p *Plan) *memQueue {
	q := &memQueue{rec: rec}
	for trial := range p.Limits.Trials {
		for _, r := range p.Records {
			q.pending = append(q.pending, &Lease{RunID: "r", TrialID: fmt.Sprintf("t-%s-%d-0", r.ID, trial), Record: r, Trial: trial})
		}
	}
	return q
}

func (q *memQueue) Lease(_ context.Context, req LeaseRequest) (*Lease, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return nil, nil
	}
	l := q.pending[0]
	q.pending = q.pending[1:]
	q.epoch++
	l.Epoch, l.TTL = q.epoch, req.TTL
	return l, nil
}

func (q *memQueue) Heartbeat(context.Context, *Lease) error { return nil }

func (q *memQueue) AppendEvents(ctx context.Context, l *Lease, evs []trajectory.Event) error {
	return q.rec.AppendEvents(ctx, l.TrialID, evs)
}

func (q *memQueue) Finish(_ context.Context, l *Lease, o *Outcome, retry bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if retry {
		next := *l
		next.Attempt++
		next.RetriesUsed++
		next.Prior = o.Spend
		next.TrialID = fmt.Sprintf("t-%s-%d-%d", l.Record.ID, l.Trial, next.Attempt)
		q.pending = append(q.pending, &next)
		return nil
	}
	q.finished = append(q.finished, o)
	return nil
}

type planOnce struct{ p *Plan }

func (s planOnce) Plan(context.Context, string) (*Plan, error) { return s.p, nil }

// runPlan runs every trial of p through one Worker and summarizes them.
func runPlan(t *testing.T, rec *batchRecorder, p *Plan) *Summary {
	t.Helper()
	q := newMemQueue(rec, p)
	w := &Worker{Queue: q, Plans: planOnce{p}, Name: "test", Slots: p.Limits.Concurrency, TTL: time.Minute, ExitWhenIdle: true}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	SortOutcomes(q.finished, p.Records)
	return Summarize("r", p.Name, StatusCompleted, len(p.Records), p.Limits.Trials, q.finished, p.Evaluators)
}

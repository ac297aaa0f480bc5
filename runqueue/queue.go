// Package runqueue is the engine's side of a store: it submits a run as
// pending trials, gives workers the store's leased queue as an
// engine.Queue, finalizes a run whose trials are done into its summary, and
// prepares an interrupted run for resume. Embedded mode and the server use
// it over their own stores; a remote worker reaches the same calls through
// the server's API.
package runqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// Store is what runqueue needs of a store.
type Store interface {
	store.Runs
	store.Queue
	store.Results
	store.Redactor
}

// Queue is a store's trial queue as the engine leases from it.
type Queue struct {
	st Store
}

// New returns the queue of st.
func New(st Store) *Queue { return &Queue{st: st} }

var _ engine.Queue = (*Queue)(nil)

// Lease claims one pending attempt; nil when there is none.
func (q *Queue) Lease(ctx context.Context, req engine.LeaseRequest) (*engine.Lease, error) {
	l, err := q.st.Lease(ctx, store.LeaseRequest{Worker: req.Worker, TTL: req.TTL, Runs: req.Runs})
	if errors.Is(err, store.ErrNoWork) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leasing a trial: %w", err)
	}
	return EngineLease(l, req.TTL)
}

// EngineLease converts a store lease to the engine's.
func EngineLease(l store.Lease, ttl time.Duration) (*engine.Lease, error) {
	var rec spec.Record
	if err := json.Unmarshal(l.Record, &rec); err != nil {
		return nil, fmt.Errorf("decoding the record of trial %s (run %s, record %q): %w", l.TrialID, l.RunID, l.RecordID, err)
	}
	return &engine.Lease{
		RunID: l.RunID, TrialID: l.TrialID, Record: rec, Trial: l.Trial,
		Attempt: max(l.Attempt-1, 0), RetriesUsed: l.RetriesUsed, Epoch: l.Epoch, TTL: ttl,
		Prior: engine.Spend{Usage: l.SpendUsage, CostUSD: l.SpendCostUSD},
	}, nil
}

// StoreLease is the store's view of an engine lease: what its fenced
// writes check.
func StoreLease(l *engine.Lease) store.Lease {
	return store.Lease{TrialID: l.TrialID, RunID: l.RunID, RecordID: l.Record.ID, Trial: l.Trial, Attempt: l.Attempt + 1, Epoch: l.Epoch}
}

// Heartbeat extends the lease by its TTL.
func (q *Queue) Heartbeat(ctx context.Context, l *engine.Lease) error {
	_, err := q.st.Heartbeat(ctx, StoreLease(l), l.TTL)
	return leaseErr(err)
}

// AppendEvents appends events to the leased attempt.
func (q *Queue) AppendEvents(ctx context.Context, l *engine.Lease, evs []trajectory.Event) error {
	return leaseErr(q.st.AppendLeased(ctx, StoreLease(l), evs))
}

// Finish records the attempt's outcome (and, with retry, queues the next).
func (q *Queue) Finish(ctx context.Context, l *engine.Lease, o *engine.Outcome, retry bool) error {
	c, err := Completion(o, retry)
	if err != nil {
		return err
	}
	return leaseErr(q.st.Complete(ctx, StoreLease(l), c))
}

// leaseErr makes the store's lost lease the engine's too.
func leaseErr(err error) error {
	if errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, engine.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", engine.ErrLeaseLost, err)
	}
	return err
}

// Completion is how an outcome is stored: its result row, scores,
// per-evaluator results (so a resumed or finalized run aggregates it exactly
// as it ran), the diff and evaluator errors as artifacts.
func Completion(o *engine.Outcome, retry bool) (store.Completion, error) {
	c := store.Completion{Retry: retry}
	for _, ev := range o.Evaluations {
		for _, s := range ev.Scores {
			c.Scores = append(c.Scores, store.Score{Name: s.Name, Value: s.Value, Details: s.Details})
		}
	}
	if o.Diff != "" {
		c.Artifacts = append(c.Artifacts, store.ArtifactInput{Name: "diff.patch", MediaType: "text/x-diff", Data: []byte(o.Diff)})
	}
	if errs := evalErrors(o); errs != nil {
		c.Artifacts = append(c.Artifacts, store.ArtifactInput{Name: "evaluator-errors.json", MediaType: "application/json", Data: errs})
	}
	if o.Status != engine.TrialErrored {
		evs := o.Evaluations
		if evs == nil {
			evs = []evaluate.EvaluatorResult{}
		}
		b, err := json.Marshal(evs)
		if err != nil {
			return c, fmt.Errorf("encoding evaluator results of record %q trial %d: %w", o.RecordID, o.Trial, err)
		}
		c.Evaluations = b
	}
	c.Result = store.TrialResult{
		Status: store.TrialFinished, ErrorKind: o.ErrorKind, Error: o.Error, Output: o.Output,
		Isolation: o.Isolation, Usage: o.Usage, CostUSD: o.CostUSD,
		SpendUsage: o.Spend.Usage, SpendCostUSD: o.Spend.CostUSD,
	}
	if o.Status == engine.TrialErrored {
		c.Result.Status = store.TrialErrored
	}
	if o.Verdict != nil {
		pass := o.Verdict.Pass
		c.Result.Passed = &pass
	}
	if retry && c.Result.Status != store.TrialErrored {
		return c, fmt.Errorf("record %q trial %d: only an errored attempt is retried", o.RecordID, o.Trial)
	}
	return c, nil
}

func evalErrors(o *engine.Outcome) []byte {
	m := map[string]string{}
	for _, ev := range o.Evaluations {
		if ev.Err != "" {
			m[ev.Evaluator] = ev.Err
		}
	}
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"evals.si/api"
	"evals.si/engine"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Queue is the server's trial queue as a remote worker leases from it: an
// engine.Queue over the worker API. Everything it sends passes through the
// redactor given, so the secrets a worker holds never reach the server.
type Queue struct {
	c *Client
}

var _ engine.Queue = (*Queue)(nil)

// Queue returns the worker queue of the server; redact rewrites each
// request body (the worker's secrets removed) before it is sent.
func (c *Client) Queue(redact func([]byte) []byte) *Queue {
	wc := *c
	wc.redact = redact
	return &Queue{c: &wc}
}

// Lease claims one attempt; nil when there is none.
func (q *Queue) Lease(ctx context.Context, req engine.LeaseRequest) (*engine.Lease, error) {
	var l api.Lease
	status, err := q.c.do(ctx, http.MethodPost, "/v1/worker/lease", api.LeaseRequest{Worker: req.Worker, TTLMS: req.TTL.Milliseconds(), Runs: req.Runs}, &l)
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	var rec spec.Record
	if err := json.Unmarshal(l.Record, &rec); err != nil {
		return nil, fmt.Errorf("decoding the record of trial %s: %w", l.TrialID, err)
	}
	return &engine.Lease{RunID: l.RunID, TrialID: l.TrialID, Record: rec, Trial: l.Trial, Attempt: max(l.Attempt-1, 0),
		RetriesUsed: l.RetriesUsed, Epoch: l.Epoch, TTL: msDuration(l.TTLMS, req.TTL),
		Prior: engine.Spend{Usage: l.PriorUsage, CostUSD: l.PriorCostUSD}}, nil
}

// Heartbeat extends the lease.
func (q *Queue) Heartbeat(ctx context.Context, l *engine.Lease) error {
	_, err := q.c.do(ctx, http.MethodPost, q.trialPath(l, "heartbeat"), api.HeartbeatRequest{Fence: api.Fence{Epoch: l.Epoch}, TTLMS: l.TTL.Milliseconds()}, nil)
	return leaseErr(err)
}

// AppendEvents appends events to the leased attempt.
func (q *Queue) AppendEvents(ctx context.Context, l *engine.Lease, evs []trajectory.Event) error {
	_, err := q.c.do(ctx, http.MethodPost, q.trialPath(l, "events"), api.EventsRequest{Fence: api.Fence{Epoch: l.Epoch}, Events: evs}, nil)
	return leaseErr(err)
}

// Finish records the attempt's outcome.
func (q *Queue) Finish(ctx context.Context, l *engine.Lease, o *engine.Outcome, retry bool) error {
	_, err := q.c.do(ctx, http.MethodPost, q.trialPath(l, "finish"), api.FinishRequest{Fence: api.Fence{Epoch: l.Epoch}, Retry: retry, Outcome: api.FromOutcome(o)}, nil)
	return leaseErr(err)
}

func (q *Queue) trialPath(l *engine.Lease, op string) string {
	return "/v1/worker/trials/" + url.PathEscape(l.TrialID) + "/" + op
}

// RunSpec returns the spec of a run the worker holds a lease in.
func (c *Client) RunSpec(ctx context.Context, runID string) (api.RunSpec, error) {
	var out api.RunSpec
	_, err := c.do(ctx, http.MethodGet, "/v1/worker/runs/"+url.PathEscape(runID), nil, &out)
	return out, err
}

func leaseErr(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Code == "lease_lost" {
		return fmt.Errorf("%w: %w", engine.ErrLeaseLost, err)
	}
	return err
}

func msDuration(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

package engine

import (
	"context"
	"errors"
	"time"

	"evals.si/spec"
	"evals.si/trajectory"
)

// Queue is where a worker leases trial attempts and records what they did:
// the store itself in embedded mode and on the server (package runqueue),
// the server's API for a remote worker (package apiclient).
type Queue interface {
	// Lease claims one pending attempt; nil (and no error) when there is
	// nothing to lease now.
	Lease(ctx context.Context, req LeaseRequest) (*Lease, error)
	// Heartbeat extends the lease by its TTL. It fails with an error
	// wrapping ErrLeaseLost when the attempt was taken back.
	Heartbeat(ctx context.Context, l *Lease) error
	// AppendEvents appends events to the leased attempt, in one durable
	// write, only while the lease holds.
	AppendEvents(ctx context.Context, l *Lease, evs []trajectory.Event) error
	// Finish records the attempt's outcome, only while the lease holds.
	// With retry, the outcome is an errored attempt and the trial gets a
	// new pending attempt.
	Finish(ctx context.Context, l *Lease, o *Outcome, retry bool) error
}

// ErrLeaseLost is wrapped by a Queue's errors when the attempt is no
// longer the worker's: the sweeper took it back after missed heartbeats.
// The worker drops the attempt; another runs the trial.
var ErrLeaseLost = errors.New("lease lost")

// LeaseRequest asks for one attempt.
type LeaseRequest struct {
	Worker string
	TTL    time.Duration
	// Runs, when set, restricts the lease to these runs.
	Runs []string
}

// Lease is a worker's claim on one attempt of one trial.
type Lease struct {
	RunID   string
	TrialID string
	Record  spec.Record
	Trial   int
	// Attempt counts earlier attempts of the trial from 0 (lost ones
	// included); RetriesUsed counts those that errored and were retried,
	// the ones the spec's retries budget limits.
	Attempt     int
	RetriesUsed int
	Epoch       int64
	TTL         time.Duration
	// Prior is what the trial's earlier attempts spent.
	Prior Spend
}

// Plans gives a worker the plan of a run it leased an attempt of. A worker
// asks once per run and closes the plan (Plan.Close) when it is done with
// the run. The plan's Records may be empty: leases carry their records.
type Plans interface {
	Plan(ctx context.Context, runID string) (*Plan, error)
}

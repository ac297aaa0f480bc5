package store

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"evals.si/trajectory"
)

// Backend is a whole store: runs, the trial queue, the event log, results
// and blobs. The SQLite *Store and postgres.Store implement it, and
// storetest.Run checks both against one suite. Callers should depend on the
// smallest of the interfaces below that serves them.
type Backend interface {
	Runs
	Queue
	EventLog
	Results
	Blobs
	Redactor
	Close() error
}

// Runs are the runs of the store.
type Runs interface {
	// CreateRun records a new run in status running.
	CreateRun(ctx context.Context, in RunInput) (Run, error)
	// GetRun returns the run with this id or unique id prefix.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns lists runs newest first.
	ListRuns(ctx context.Context, opt ListRunsOptions) ([]Run, error)
	// FinishRun records a run's end; FinishRun of a run already finished
	// with a terminal status overwrites it (resume finishes a run again),
	// except that a cancelled run stays cancelled (its summary is
	// recorded).
	FinishRun(ctx context.Context, id, status string, summary json.RawMessage, errMsg string) error
	// ResumeRun puts an interrupted, failed or killed (still running) run
	// back in status running and returns it.
	ResumeRun(ctx context.Context, id string) (Run, error)
}

// Queue is the trial queue. A trial (one trial index of one record of a
// run) has one row per attempt; the row of its highest attempt is the
// trial's current state. Attempts go through:
//
//	pending ──Lease──> running ──Complete──> finished | errored
//	   │                  │            └─ Complete{Retry} ─> errored, plus attempt+1 pending
//	   │                  ├─ lease expired, Requeue ─> lost, plus attempt+1 pending
//	   └──── CancelRun ───┴─> cancelled
//
// Every claim takes a new, store-wide increasing lease epoch; every write a
// leaseholder makes (AppendLeased, Heartbeat, Complete) is checked against
// it in the same statement or transaction, and fails with ErrLeaseLost when
// the row is no longer running under that epoch. So a worker that lost its
// lease can neither add events to nor finish an attempt another worker, or
// the sweeper, has taken over.
type Queue interface {
	// Enqueue registers pending trials (attempt 1) of a run in the order
	// given, which is the order leases hand them out within the run. Trials
	// that already exist (by run, record and trial index) are left as they
	// are, so Enqueue is idempotent.
	Enqueue(ctx context.Context, runID string, trials []TrialInput) error
	// Lease claims the first pending attempt (oldest run first, then
	// enqueue order) of a running run that is below its MaxRunning, marks
	// it running under a new epoch until now+TTL, and returns it. It
	// returns ErrNoWork when nothing can be leased.
	Lease(ctx context.Context, req LeaseRequest) (Lease, error)
	// Heartbeat extends the lease to now+ttl and returns the new end.
	Heartbeat(ctx context.Context, l Lease, ttl time.Duration) (time.Time, error)
	// AppendLeased appends events to the leased attempt (as AppendEvents),
	// only while the lease holds.
	AppendLeased(ctx context.Context, l Lease, evs []trajectory.Event) error
	// Complete records the attempt's end in one transaction: its result,
	// scores, evaluator results and artifacts. With Retry (an errored
	// attempt to run again) it also inserts the next attempt, pending, with
	// RetriesUsed one higher and the spend carried. An errored attempt keeps
	// no verdict; a score or artifact named twice is refused. Nothing is
	// written when the lease is lost or anything of it fails.
	Complete(ctx context.Context, l Lease, c Completion) error
	// Requeue takes back running attempts whose lease ended before
	// req.Expired (or every running attempt of req.RunID, with All): each
	// becomes lost, and a new pending attempt takes its place, unless the
	// trial has lost MaxLost attempts already, in which case it is errored
	// with error kind "lease". It returns the attempts it took back.
	Requeue(ctx context.Context, req RequeueRequest) ([]Trial, error)
	// CancelRun cancels a running run (id or a unique id prefix) in one
	// transaction: the run becomes cancelled, with the time, and every
	// pending or running attempt of it cancelled, so no lease hands a
	// trial of it out again and a worker's next write under a lease of it
	// (Heartbeat, AppendLeased, Complete) fails with ErrCancelled and
	// writes nothing. Trials enqueued into a cancelled run are cancelled
	// too. A run that is not running (cancelled, finished, interrupted)
	// is returned unchanged. The run's summary is left to the caller
	// (runqueue.Finalize), as for any run whose trials are all done.
	CancelRun(ctx context.Context, id string) (Run, error)

	// ListTrials returns the current (highest) attempt of every trial of a
	// run, in enqueue order.
	ListTrials(ctx context.Context, runID string) ([]Trial, error)
	// ListAttempts returns every attempt of every trial of a run, in
	// enqueue order and then attempt order.
	ListAttempts(ctx context.Context, runID string) ([]Trial, error)
	// GetTrial returns the attempt with this id or unique id prefix.
	GetTrial(ctx context.Context, id string) (Trial, error)
	// CountTrials counts the run's trials (current attempts) by status.
	CountTrials(ctx context.Context, runID string) (map[string]int, error)
}

// EventLog is the trajectory events of attempts.
type EventLog interface {
	AppendEvent(ctx context.Context, trialID string, e trajectory.Event) error
	AppendEvents(ctx context.Context, trialID string, evs []trajectory.Event) error
	// Events returns events with seq > afterSeq in order, at most limit
	// (0: all).
	Events(ctx context.Context, trialID string, afterSeq, limit int) ([]trajectory.Event, error)
	CountEvents(ctx context.Context, trialID string) (int, error)
}

// Results are what finished attempts produced besides their row.
type Results interface {
	PutScores(ctx context.Context, trialID string, scores []Score) error
	TrialScores(ctx context.Context, trialID string) ([]Score, error)
	// Scores returns the scores of every attempt of the run, by attempt
	// (trial) id; callers pick the attempts they show.
	Scores(ctx context.Context, runID string) (map[string][]Score, error)
	PutEvaluations(ctx context.Context, trialID string, results json.RawMessage) error
	// Evaluations returns the evaluator results of every attempt of the
	// run, by attempt (trial) id.
	Evaluations(ctx context.Context, runID string) (map[string]json.RawMessage, error)
	PutArtifact(ctx context.Context, trialID, name, mediaType string, r io.Reader) (Artifact, error)
	Artifacts(ctx context.Context, trialID string) ([]Artifact, error)
}

// Blobs are content-addressed bytes ("sha256:<hex>").
type Blobs interface {
	PutBlob(ctx context.Context, data []byte) (string, error)
	PutBlobReader(ctx context.Context, r io.Reader) (digest string, size int64, err error)
	GetBlob(ctx context.Context, digest string) ([]byte, error)
	OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error)
	BlobSize(ctx context.Context, digest string) (int64, error)
}

// Redactor removes registered secrets from everything the store keeps.
type Redactor interface {
	AddSecrets(values ...string)
	RedactJSON(b []byte) []byte
}

// ErrNoWork is returned by Lease when no attempt can be leased.
var ErrNoWork = errors.New("no trial to lease")

// ErrLeaseLost is returned (wrapped) by a leaseholder's write when the
// attempt is no longer running under the lease's epoch.
var ErrLeaseLost = errors.New("lease lost")

// MaxLost is how many attempts of one trial may be lost (their worker died
// or stalled) before the trial is errored instead of requeued: a task that
// kills its worker every time must not loop forever.
const MaxLost = 5

// Lease is a claim on one attempt.
type Lease struct {
	TrialID  string
	RunID    string
	RecordID string
	Trial    int
	// Attempt counts from 1 over every attempt of the trial, lost ones
	// included.
	Attempt int
	// RetriesUsed counts earlier attempts that errored and were retried;
	// lost attempts do not count.
	RetriesUsed int
	Epoch       int64
	Worker      string
	Until       time.Time
	// Record is the dataset record as stored at Enqueue.
	Record json.RawMessage
	// Spend is what earlier attempts of the trial spent.
	SpendUsage   trajectory.Usage
	SpendCostUSD float64
}

// LeaseRequest asks for one attempt.
type LeaseRequest struct {
	// Worker names the claimant (kept on the row, for display).
	Worker string
	TTL    time.Duration
	// Runs, when set, restricts the lease to these runs; Projects to runs
	// of these projects.
	Runs     []string
	Projects []string
}

// RequeueRequest selects running attempts to take back.
type RequeueRequest struct {
	// Expired takes back attempts whose lease ended before it.
	Expired time.Time
	// RunID restricts to one run; with All, every running attempt of it is
	// taken back whatever its lease (resume, after the process died).
	RunID string
	All   bool
}

// Completion is how a leased attempt ended.
type Completion struct {
	Result TrialResult
	Scores []Score
	// Evaluations are the per-evaluator results (JSON list); nil for an
	// errored attempt.
	Evaluations json.RawMessage
	Artifacts   []ArtifactInput
	// Retry inserts the next attempt (Result must be errored).
	Retry bool
}

// ArtifactInput is an artifact to store with a completion.
type ArtifactInput struct {
	Name      string
	MediaType string
	Data      []byte
}

// Trial statuses beyond the four of trials.go: a lost attempt's lease ran
// out (its worker died, stalled or was interrupted); a later attempt took
// its place.
const TrialLost = "lost"

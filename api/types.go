// Package api is the server's HTTP API as data: the request and response
// bodies both the server and its clients (the CLI, remote workers) use, and
// the OpenAPI description served at /openapi.json. Keys are snake_case, as
// in `evalsi run --json`; lists are [] rather than null.
package api

import (
	"encoding/json"
	"time"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/trajectory"
)

// Paths of the API. Everything under /v1 needs a bearer token.
const (
	PathOpenAPI = "/openapi.json"
	PathHealth  = "/healthz"
)

// Error is every error response's body.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what was wrong and what to do.
type ErrorBody struct {
	// Code is a stable machine name: bad_request, unauthenticated,
	// forbidden, not_found, conflict, lease_lost, too_large, refused,
	// internal.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the request field (or spec field path) at fault.
	Field string `json:"field,omitempty"`
	// Reason, when set, says more of why, as a stable machine name: a
	// worker's write refused as lease_lost has reason ReasonCancelled when
	// the attempt's run was cancelled.
	Reason string `json:"reason,omitempty"`
}

// ReasonCancelled is the Reason of a lease_lost error when the attempt's
// run was cancelled: the worker stops the attempt and reports nothing more
// of it (a worker that does not know the reason treats it as any lost
// lease, which comes to the same).
const ReasonCancelled = "cancelled"

// Run statuses (Run.Status). A run is running until it ends completed,
// failed or cancelled (POST /v1/runs/{id}/cancel); interrupted is a run of
// embedded mode stopped to be resumed.
const (
	RunRunning     = "running"
	RunCompleted   = "completed"
	RunInterrupted = "interrupted"
	RunFailed      = "failed"
	RunCancelled   = "cancelled"
)

// SubmitRequest starts a run.
type SubmitRequest struct {
	// Project owns the run; default: the token's project.
	Project string `json:"project,omitempty"`
	// Name is the spec file's name, for messages and the run's default name.
	Name string `json:"name,omitempty"`
	// Spec is the run spec as JSON (the client loads and validates the
	// YAML; the server validates again). Relative paths in it resolve
	// against the server's datasets_dir.
	Spec json.RawMessage `json:"spec"`
}

// Run is a run as the API shows it.
type Run struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Project        string    `json:"project"`
	Status         string    `json:"status"`
	CreatedAt      time.Time `json:"created_at"`
	FinishedAt     time.Time `json:"finished_at,omitzero"`
	Error          string    `json:"error,omitempty"`
	DatasetVersion string    `json:"dataset_version,omitempty"`
	// Counts are the run's trials by status (pending, running, finished,
	// errored, cancelled).
	Counts map[string]int `json:"counts"`
	// Summary is the run's summary once it has finished (the object
	// `evalsi run --json` prints, with aggregate details).
	Summary *engine.Summary `json:"summary,omitempty"`
}

// RunList is a page of runs, newest first; Next is the cursor of the next
// page ("" at the end).
type RunList struct {
	Runs []Run  `json:"runs"`
	Next string `json:"next,omitempty"`
}

// Trial is a trial's current attempt.
type Trial struct {
	ID           string             `json:"id"`
	RunID        string             `json:"run_id"`
	RecordID     string             `json:"record_id"`
	Trial        int                `json:"trial"`
	Attempt      int                `json:"attempt"`
	Status       string             `json:"status"`
	Passed       *bool              `json:"passed,omitempty"`
	ErrorKind    string             `json:"error_kind,omitempty"`
	Error        string             `json:"error,omitempty"`
	Output       string             `json:"output,omitempty"`
	CostUSD      float64            `json:"cost_usd"`
	InputTokens  int                `json:"input_tokens"`
	OutputTokens int                `json:"output_tokens"`
	Scores       map[string]float64 `json:"scores"`
	StartedAt    time.Time          `json:"started_at,omitzero"`
	FinishedAt   time.Time          `json:"finished_at,omitzero"`
}

// TrialList is a run's trials.
type TrialList struct {
	Trials []Trial `json:"trials"`
}

// EventList is a page of a trial's events.
type EventList struct {
	Events []trajectory.Event `json:"events"`
}

// Dataset is a file under the server's datasets_dir.
type Dataset struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Version is the file's content digest; a run over it records it.
	Version string `json:"version"`
}

// DatasetList lists datasets.
type DatasetList struct {
	Datasets []Dataset `json:"datasets"`
}

// PromoteRequest appends a run's matching records to a promoted dataset.
type PromoteRequest struct {
	Dataset        string `json:"dataset"`
	When           string `json:"when"`
	IncludeOutputs bool   `json:"include_outputs,omitempty"`
}

// PromoteResult says what promote did.
type PromoteResult struct {
	Added   int    `json:"added"`
	Skipped int    `json:"skipped"`
	Path    string `json:"path"`
}

// LeaseRequest asks for one attempt (workers only).
type LeaseRequest struct {
	Worker string `json:"worker"`
	// TTLMS is the lease length in milliseconds (the server caps it).
	TTLMS int64    `json:"ttl_ms,omitempty"`
	Runs  []string `json:"runs,omitempty"`
}

// Lease is a worker's claim on an attempt.
type Lease struct {
	RunID        string           `json:"run_id"`
	TrialID      string           `json:"trial_id"`
	Record       json.RawMessage  `json:"record"`
	Trial        int              `json:"trial"`
	Attempt      int              `json:"attempt"`
	RetriesUsed  int              `json:"retries_used"`
	Epoch        int64            `json:"epoch"`
	TTLMS        int64            `json:"ttl_ms"`
	PriorUsage   trajectory.Usage `json:"prior_usage"`
	PriorCostUSD float64          `json:"prior_cost_usd"`
}

// RunSpec is what a worker plans a run from.
type RunSpec struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	SpecPath string          `json:"spec_path,omitempty"`
	Spec     json.RawMessage `json:"spec"`
}

// Fence names the lease a worker's write is made under.
type Fence struct {
	Epoch int64 `json:"epoch"`
}

// HeartbeatRequest extends a lease.
type HeartbeatRequest struct {
	Fence
	TTLMS int64 `json:"ttl_ms,omitempty"`
}

// EventsRequest appends events to a leased attempt.
type EventsRequest struct {
	Fence
	Events []trajectory.Event `json:"events"`
}

// FinishRequest records a leased attempt's outcome.
type FinishRequest struct {
	Fence
	Retry   bool    `json:"retry,omitempty"`
	Outcome Outcome `json:"outcome"`
}

// Outcome is an attempt's outcome on the wire (engine.Outcome's recorded
// fields).
type Outcome struct {
	RecordID    string                     `json:"record_id"`
	Trial       int                        `json:"trial"`
	Attempt     int                        `json:"attempt"`
	Status      string                     `json:"status"`
	ErrorKind   string                     `json:"error_kind,omitempty"`
	Error       string                     `json:"error,omitempty"`
	Output      string                     `json:"output,omitempty"`
	Diff        string                     `json:"diff,omitempty"`
	Verdict     *trajectory.Checker        `json:"verdict,omitempty"`
	Evaluations []evaluate.EvaluatorResult `json:"evaluations"`
	Usage       trajectory.Usage           `json:"usage"`
	CostUSD     float64                    `json:"cost_usd"`
	Spend       trajectory.Usage           `json:"spend_usage"`
	SpendCost   float64                    `json:"spend_cost_usd"`
	Isolation   json.RawMessage            `json:"isolation,omitempty"`
	Started     time.Time                  `json:"started"`
	Finished    time.Time                  `json:"finished"`
}

// FromOutcome is o on the wire.
func FromOutcome(o *engine.Outcome) Outcome {
	return Outcome{
		RecordID: o.RecordID, Trial: o.Trial, Attempt: o.Attempt, Status: o.Status, ErrorKind: o.ErrorKind, Error: o.Error,
		Output: o.Output, Diff: o.Diff, Verdict: o.Verdict, Evaluations: o.Evaluations, Usage: o.Usage, CostUSD: o.CostUSD,
		Spend: o.Spend.Usage, SpendCost: o.Spend.CostUSD, Isolation: o.Isolation, Started: o.Started, Finished: o.Finished,
	}
}

// EngineOutcome is the outcome the wire form describes.
func (o Outcome) EngineOutcome(runID string) *engine.Outcome {
	return &engine.Outcome{
		RunID: runID, RecordID: o.RecordID, Trial: o.Trial, Attempt: o.Attempt, Status: o.Status, ErrorKind: o.ErrorKind,
		Error: o.Error, Output: o.Output, Diff: o.Diff, Verdict: o.Verdict, Evaluations: o.Evaluations, Usage: o.Usage,
		CostUSD: o.CostUSD, Spend: engine.Spend{Usage: o.Spend, CostUSD: o.SpendCost}, Isolation: o.Isolation,
		Started: o.Started, Finished: o.Finished,
	}
}

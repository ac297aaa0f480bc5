// Package engine runs trials: a Worker leases attempts from a Queue, runs
// each with its run's plan under a per-trial timeout, streams its events,
// records its outcome (queuing a retry of an infrastructure error the
// budget allows), and Summarize aggregates finished trials into scores.
// Submitting a run and finalizing it belong to the host (runqueue).
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"time"

	"evals.si/evaluate"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Run statuses.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
	StatusFailed      = "failed"
)

// Trial statuses: a completed trial was scored; an errored one hit an
// infrastructure error that persisted through its retries.
const (
	TrialCompleted = "completed"
	TrialErrored   = "errored"
)

// Outcome is a finished trial.
type Outcome struct {
	RunID    string
	RecordID string
	// Category is the record's metadata.category (a benchmark's category),
	// by which the summary breaks scores down; empty for none.
	Category string
	Trial    int
	Attempt  int
	Status   string
	// ErrorKind classifies an errored trial: image, setup, sandbox, service
	// (the task's service or its healthcheck), checker, model, agent,
	// timeout.
	ErrorKind string
	Error     string
	Output    string
	Diff      string
	Verdict   *trajectory.Checker
	// Evaluations holds one result per configured evaluator, in spec order.
	Evaluations []evaluate.EvaluatorResult
	Usage       trajectory.Usage
	CostUSD     float64
	// Spend is what every attempt of the trial spent, errored and retried
	// ones included (Usage and CostUSD are the final attempt's).
	Spend     Spend
	Isolation json.RawMessage
	Started   time.Time
	Finished  time.Time
	// Timing splits the attempt's wall time (model, sandbox, engine).
	Timing Timing
}

// Spend is tokens and cost spent.
type Spend struct {
	Usage   trajectory.Usage
	CostUSD float64
}

func (s Spend) add(o Spend) Spend {
	return Spend{Usage: s.Usage.Add(o.Usage), CostUSD: s.CostUSD + o.CostUSD}
}

// ErrorKindStore is the error kind of a trial the store could not record:
// its result exists only in this run's summary, so the run is failed.
const ErrorKindStore = "store"

// TrialRunner runs one attempt of one trial. An error return is an
// infrastructure error (retried, then reported); a completed trial returns
// its outcome with scores.
type TrialRunner interface {
	RunTrial(ctx context.Context, t *TrialContext) (*Outcome, error)
}

// TrialContext is what a trial runner gets.
type TrialContext struct {
	RunID   string
	TrialID string
	Record  spec.Record
	Trial   int
	Attempt int
	Emit    trajectory.Sink
	// Events returns the events emitted so far in this attempt.
	Events func() []trajectory.Event
}

// ErrorKinder lets infrastructure errors say which phase failed.
type ErrorKinder interface{ ErrorKind() string }

// Progress is a snapshot for live displays.
type Progress struct {
	Total, Done, Errored, Passing int
	// Running counts the trials in flight (attempts being run) when known.
	Running int
	CostUSD float64
	Elapsed time.Duration
	// Last is the trial that just finished; nil in an update that only
	// says how many are running (Tracker.SetRunning).
	Last *Outcome
	// Providers are the model providers' adaptive concurrency limits.
	Providers []model.LimiterState
}

// Plan is a run ready to execute.
type Plan struct {
	Name     string
	SpecPath string
	// Spec is the run spec as run, stored with the run; the engine reads
	// only Limits.
	Spec    *spec.Spec
	Limits  Limits
	Records []spec.Record
	Runner  TrialRunner
	// Evaluators are the evaluator configs in effect (the spec's, or the
	// defaults), in the order of each outcome's Evaluations.
	Evaluators []spec.Evaluator
	// Pass names the score that counts as passing in live progress.
	Pass string
	// Providers, when set, reports the model providers' adaptive limits
	// for live progress.
	Providers func() []model.LimiterState
	// Close, when set, releases what the plan holds (an external harness
	// it started); called once when the plan is no longer used.
	Close func()
}

// Limits are the run-wide numbers a worker schedules by, resolved from the
// spec once (defaults applied) by the planner.
type Limits struct {
	// Trials per record (at least 1).
	Trials int
	// Concurrency caps the run's attempts in flight (at least 1).
	Concurrency int
	// Retries is how often an errored attempt is run again.
	Retries int
	// TrialTimeout bounds one attempt.
	TrialTimeout time.Duration
	// Caps bound what a trial holds in memory.
	Caps *spec.Caps
}

// LimitsOf resolves a spec's limits with the defaults: trials 1,
// concurrency 2 per CPU, retries 2, trial_timeout 30m.
func LimitsOf(s *spec.Spec) Limits {
	l := Limits{Trials: max(s.Trials, 1), Concurrency: s.Concurrency, Retries: 2, TrialTimeout: s.TrialTimeout.D(), Caps: s.Caps}
	if l.Concurrency <= 0 {
		l.Concurrency = 2 * runtime.NumCPU()
	}
	if s.Retries != nil {
		l.Retries = *s.Retries
	}
	if l.TrialTimeout <= 0 {
		l.TrialTimeout = 30 * time.Minute
	}
	return l
}

// Summary is a finished run's report.
type Summary struct {
	RunID   string             `json:"run_id"`
	Name    string             `json:"name"`
	Status  string             `json:"status"`
	Records int                `json:"records"`
	Trials  int                `json:"trials"`
	Errored int                `json:"errored"`
	Scores  map[string]float64 `json:"scores"`
	// Aggregate holds per-evaluator means, errored counts and pass@k.
	Aggregate evaluate.Summary `json:"aggregate"`
	CostUSD   float64          `json:"cost_usd"`
	Tokens    int              `json:"tokens"`
	// CostUSDInclRetries and TokensInclRetries are the run's whole spend:
	// CostUSD and Tokens count each trial's final attempt, these every
	// attempt, errored and retried ones included. Attempts counts them.
	CostUSDInclRetries float64 `json:"cost_usd_incl_retries"`
	TokensInclRetries  int     `json:"tokens_incl_retries"`
	Attempts           int     `json:"attempts"`
	Elapsed            float64 `json:"elapsed_seconds"`
	// ErrorsByKind counts errored trials per error kind.
	ErrorsByKind map[string]int `json:"errors_by_kind,omitempty"`
	// NotStarted counts the trials a run stopped by its budget did not
	// start (budget.go); they wait, pending, for a resume.
	NotStarted int `json:"not_started,omitempty"`
	// Stopped is why the run stopped starting trials ("budget $0.50
	// reached"); "" for a run its budget did not stop. See Label.
	Stopped string `json:"stopped,omitempty"`
}

func passed(o *Outcome, name string) bool {
	for _, s := range o.Scores() {
		if s.Name == name {
			return s.Value >= 1
		}
	}
	return false
}

// Scores flattens the outcome's evaluations.
func (o *Outcome) Scores() []evaluate.Score {
	var out []evaluate.Score
	for _, ev := range o.Evaluations {
		out = append(out, ev.Scores...)
	}
	return out
}

// NonRetryable marks errors that a retry cannot fix (a spec problem found
// late, a missing key).
type NonRetryable struct{ Err error }

func (e *NonRetryable) Error() string { return e.Err.Error() }
func (e *NonRetryable) Unwrap() error { return e.Err }

func retryable(err error) bool {
	var nr *NonRetryable
	return !errors.As(err, &nr)
}

func kindOf(err error) string {
	var k ErrorKinder
	if errors.As(err, &k) {
		return k.ErrorKind()
	}
	return "infra"
}

// Summarize aggregates finished trials into a run summary.
func Summarize(runID, name, status string, records, trials int, outcomes []*Outcome, evals []spec.Evaluator) *Summary {
	sum := &Summary{RunID: runID, Name: name, Status: status, Records: records, Trials: trials, ErrorsByKind: map[string]int{}}
	results := make([]evaluate.TrialResult, 0, len(outcomes))
	for _, o := range outcomes {
		sum.CostUSD += o.CostUSD
		sum.Tokens += o.Usage.Total()
		spend := o.Spend
		if spend.Usage.Total() == 0 && spend.CostUSD == 0 {
			spend = Spend{Usage: o.Usage, CostUSD: o.CostUSD} // recorded before spend was kept
		}
		sum.CostUSDInclRetries += spend.CostUSD
		sum.TokensInclRetries += spend.Usage.Total()
		sum.Attempts += o.Attempt + 1
		r := evaluate.TrialResult{RecordID: o.RecordID, Trial: o.Trial, Group: o.Category, Evaluations: o.Evaluations}
		if o.Status == TrialErrored {
			sum.Errored++
			sum.ErrorsByKind[o.ErrorKind]++
			r.Err = o.Error
		}
		results = append(results, r)
	}
	sum.Aggregate = evaluate.Aggregate(evals, results)
	sum.Scores = sum.Aggregate.Scores()
	if len(sum.ErrorsByKind) == 0 {
		sum.ErrorsByKind = nil
	}
	return sum
}

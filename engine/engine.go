// Package engine runs a run spec: it plans records × trials, runs them with
// a concurrency limit and a per-trial timeout, retries infrastructure errors,
// records everything as it happens and aggregates the scores.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
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

// Recorder is where the engine writes what happens, as it happens.
type Recorder interface {
	StartRun(ctx context.Context, r RunStart) (runID string, err error)
	FinishRun(ctx context.Context, runID, status string, summary *Summary, errMsg string) error
	StartTrial(ctx context.Context, runID string, rec spec.Record, trial, attempt int) (trialID string, err error)
	AppendEvent(ctx context.Context, trialID string, e trajectory.Event) error
	FinishTrial(ctx context.Context, trialID string, o *Outcome) error
}

// RunStart describes a new run.
type RunStart struct {
	Name     string
	SpecPath string
	Spec     json.RawMessage
	Records  int
	Trials   int
}

// Outcome is a finished trial.
type Outcome struct {
	RunID    string
	RecordID string
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
	CostUSD                       float64
	Elapsed                       time.Duration
	// Last is the trial that just finished.
	Last *Outcome
	// Providers are the model providers' adaptive concurrency limits.
	Providers []model.LimiterState
}

// Engine runs specs.
type Engine struct {
	Recorder Recorder
	Logger   *slog.Logger
	// OnProgress, when set, is called after every trial (serialised).
	OnProgress func(Progress)
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
	// Resume, when set, continues an existing run instead of starting one.
	Resume *Resume
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

// Resume continues a run that was interrupted or killed. The caller has
// put the run back in status running and reads its finished trials back;
// the engine runs every other (record, trial) of the plan from the start
// and aggregates old and new outcomes together, each counted once.
type Resume struct {
	RunID string
	// Done are the outcomes of the run's finished (completed or errored)
	// trials, kept as they are.
	Done []*Outcome
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
}

type job struct {
	record spec.Record
	trial  int
}

type trialKey struct {
	record string
	trial  int
}

// Run executes the plan. It returns the summary even when ctx is canceled
// (status interrupted); an error means the run could not be recorded.
func (e *Engine) Run(ctx context.Context, p *Plan) (*Summary, error) {
	s := p.Spec
	lim := p.Limits
	trials, conc, retries, timeout := lim.Trials, lim.Concurrency, lim.Retries, lim.TrialTimeout
	var (
		runID string
		done  = map[trialKey]bool{}
		// outcomes holds every finished trial of the run, earlier ones
		// (resume) first.
		outcomes []*Outcome
		prog     = Progress{Total: len(p.Records) * trials}
	)
	if r := p.Resume; r != nil {
		runID = r.RunID
		for _, o := range r.Done {
			k := trialKey{o.RecordID, o.Trial}
			if done[k] {
				return nil, fmt.Errorf("resuming run %s: record %q trial %d is finished twice", runID, o.RecordID, o.Trial)
			}
			done[k] = true
			outcomes = append(outcomes, o)
			prog.Done++
			if o.Status == TrialErrored {
				prog.Errored++
			} else if passed(o, p.Pass) {
				prog.Passing++
			}
			prog.CostUSD += o.CostUSD
		}
	} else {
		specJSON, err := json.Marshal(s)
		if err != nil {
			return nil, fmt.Errorf("encoding spec: %w", err)
		}
		runID, err = e.Recorder.StartRun(ctx, RunStart{Name: p.Name, SpecPath: p.SpecPath, Spec: specJSON, Records: len(p.Records), Trials: trials})
		if err != nil {
			return nil, fmt.Errorf("recording run start: %w", err)
		}
	}
	log := e.logger().With("run", runID)
	start := time.Now()

	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				o := e.runTrial(ctx, log, p, runID, j, retries, timeout)
				if o == nil {
					continue // interrupted: left unfinished for resume
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				prog.Done++
				if o.Status == TrialErrored {
					prog.Errored++
				} else if passed(o, p.Pass) {
					prog.Passing++
				}
				prog.CostUSD += o.CostUSD
				prog.Elapsed = time.Since(start)
				prog.Last = o
				if p.Providers != nil {
					prog.Providers = p.Providers()
				}
				if e.OnProgress != nil {
					e.OnProgress(prog)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for trial := range trials {
		for _, rec := range p.Records {
			if done[trialKey{rec.ID, trial}] {
				continue
			}
			select {
			case jobs <- job{record: rec, trial: trial}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()

	status, errMsg := StatusCompleted, ""
	if ctx.Err() != nil {
		status = StatusInterrupted
	}
	if n, first := storeErrors(outcomes); n > 0 {
		// The store lacks these trials' results: the run is not a complete
		// record, whatever its summary says.
		status = StatusFailed
		errMsg = fmt.Sprintf("%d trial(s) could not be recorded in the store (first: %s); resume the run to rerun them", n, first)
		log.Error("run failed", "err", errMsg)
	}
	// Aggregate in plan order, not completion order, so that a run's
	// summary does not depend on scheduling (float sums are order-sensitive)
	// and a resumed run sums exactly like an uninterrupted one.
	order := make(map[string]int, len(p.Records))
	for i, r := range p.Records {
		order[r.ID] = i
	}
	slices.SortStableFunc(outcomes, func(a, b *Outcome) int {
		if a.Trial != b.Trial {
			return a.Trial - b.Trial
		}
		return order[a.RecordID] - order[b.RecordID]
	})
	sum := Summarize(runID, p.Name, status, len(p.Records), trials, outcomes, p.Evaluators)
	sum.Elapsed = time.Since(start).Seconds()
	// Record the end even when interrupted: the caller's context is done.
	if err := e.Recorder.FinishRun(context.WithoutCancel(ctx), runID, status, sum, errMsg); err != nil {
		return sum, fmt.Errorf("recording run end: %w", err)
	}
	return sum, nil
}

// storeErrors counts the outcomes the store could not record.
func storeErrors(outcomes []*Outcome) (n int, first string) {
	for _, o := range outcomes {
		if o.Status == TrialErrored && o.ErrorKind == ErrorKindStore {
			if n == 0 {
				first = o.Error
			}
			n++
		}
	}
	return n, first
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

// runTrial runs one trial with retries. It returns nil when the run was
// interrupted before the trial finished.
func (e *Engine) runTrial(ctx context.Context, log *slog.Logger, p *Plan, runID string, j job, retries int, timeout time.Duration) *Outcome {
	var (
		last  *Outcome
		spent Spend // by every attempt so far
	)
	for attempt := 0; attempt <= retries; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		trialID, err := e.Recorder.StartTrial(ctx, runID, j.record, j.trial, attempt)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Not silently dropped: an errored trial that counts in the
			// summary and fails the run (see Run), retried like any
			// infrastructure error.
			now := time.Now()
			last = &Outcome{RunID: runID, RecordID: j.record.ID, Trial: j.trial, Attempt: attempt, Status: TrialErrored,
				ErrorKind: ErrorKindStore, Error: fmt.Sprintf("recording the trial's start: %v", err), Spend: spent, Started: now, Finished: now}
			log.Error("recording trial start", "record", j.record.ID, "trial", j.trial, "attempt", attempt, "err", err)
			continue
		}
		tc := &TrialContext{RunID: runID, TrialID: trialID, Record: j.record, Trial: j.trial, Attempt: attempt}
		// Events stream to the store through the journal and are also kept,
		// large texts cut, for the evaluators of this trial.
		jr := newJournal(ctx, e.Recorder, trialID)
		mem := newMemoryBudget(p.Limits.Caps)
		var (
			evMu   sync.Mutex
			events []trajectory.Event
			// called sums the model calls the attempt recorded: the spend
			// of an attempt that errors before returning its usage.
			called Spend
		)
		tc.Emit = trajectory.SinkFunc(func(ev trajectory.Event) error {
			evMu.Lock()
			defer evMu.Unlock()
			ev.Seq = len(events) + 1
			if ev.Time.IsZero() {
				ev.Time = time.Now()
			}
			if err := jr.add(ev); err != nil {
				return err
			}
			if mc := ev.ModelCall; mc != nil {
				called = called.add(Spend{Usage: mc.Usage, CostUSD: mc.CostUSD})
			}
			events = append(events, mem.forMemory(ev))
			return nil
		})
		tc.Events = func() []trajectory.Event {
			evMu.Lock()
			defer evMu.Unlock()
			return slices.Clone(events)
		}
		started := time.Now()
		m := &meter{}
		tctx, cancel := context.WithTimeout(withMeter(ctx, m), timeout)
		o, err := p.Runner.RunTrial(tctx, tc)
		timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded)
		cancel()
		if ctx.Err() != nil {
			// Interrupted: the trial stays unfinished, to be rerun on resume.
			_ = jr.flush()
			return nil
		}
		if o == nil {
			o = &Outcome{}
		}
		o.RunID, o.RecordID, o.Trial, o.Attempt = runID, j.record.ID, j.trial, attempt
		if err != nil || timedOut {
			o.Status = TrialErrored
			o.ErrorKind = kindOf(err)
			if timedOut {
				o.ErrorKind = "timeout"
				if err == nil {
					err = fmt.Errorf("trial exceeded trial_timeout %s", timeout)
				}
			}
			o.Error = err.Error()
			o.Evaluations = nil
			_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindError, Error: &trajectory.Error{Kind: o.ErrorKind, Message: o.Error}})
			log.Warn("trial errored", "record", j.record.ID, "trial", j.trial, "attempt", attempt, "kind", o.ErrorKind, "err", err)
		} else {
			o.Status = TrialCompleted
		}
		if ferr := jr.flush(); ferr != nil && o.Status == TrialCompleted {
			// Scores over a trajectory the store does not have would not
			// be reproducible: an infrastructure error, retried.
			err = ferr
			o.Status, o.ErrorKind, o.Error, o.Evaluations = TrialErrored, "infra", ferr.Error(), nil
			log.Warn("trial errored", "record", j.record.ID, "trial", j.trial, "attempt", attempt, "kind", o.ErrorKind, "err", ferr)
		}
		o.Started, o.Finished = started, time.Now()
		o.Timing = m.timing(o.Finished.Sub(started))
		// The attempt's own report of its spend wins (an agent's session
		// totals); without one, its recorded model calls are what it spent.
		evMu.Lock()
		attemptSpend := Spend{Usage: o.Usage, CostUSD: o.CostUSD}
		if attemptSpend.Usage.Total() == 0 && attemptSpend.CostUSD == 0 {
			attemptSpend = called
		}
		evMu.Unlock()
		spent = spent.add(attemptSpend)
		o.Spend = spent
		last = o
		if o.Status == TrialErrored && retryable(err) && attempt < retries {
			// Not finished in the store: the next attempt resets the trial,
			// and a crash before it leaves the trial unfinished, so resume
			// retries it as this run would have.
			continue
		}
		if ferr := e.Recorder.FinishTrial(context.WithoutCancel(ctx), trialID, o); ferr != nil {
			// The store does not have this result: the trial counts as
			// errored and the run fails (see Run), rather than a summary
			// the store cannot reproduce.
			log.Error("recording trial end", "trial", trialID, "err", ferr)
			o.Status, o.ErrorKind, o.Error, o.Evaluations = TrialErrored, ErrorKindStore, fmt.Sprintf("recording the trial's end: %v", ferr), nil
		}
		return o
	}
	return last
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

func (e *Engine) logger() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
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
		r := evaluate.TrialResult{RecordID: o.RecordID, Trial: o.Trial, Evaluations: o.Evaluations}
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

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"evals.si/internal/errtext"
	"evals.si/trajectory"
)

// Worker runs leased attempts: it leases one attempt per free slot, runs it
// with the plan of its run while heartbeats keep the lease, and records the
// outcome through the queue. An errored attempt the retry budget allows is
// finished with retry, which queues the trial's next attempt for any worker.
// Embedded mode runs one Worker in-process (ExitWhenIdle); `evalsid worker`
// runs one against the server's API until stopped.
type Worker struct {
	Queue Queue
	Plans Plans
	// Name identifies the worker on the leases it holds.
	Name string
	// Slots caps attempts in flight (default 2 per CPU). A run's own
	// concurrency is enforced by the queue (max_running).
	Slots int
	// TTL is the lease length (default 30s); heartbeats come every TTL/3.
	TTL time.Duration
	// Poll is how long to wait before leasing again when nothing was
	// leasable (default 250ms).
	Poll time.Duration
	// Runs restricts leases to these runs.
	Runs []string
	// ExitWhenIdle returns from Run once nothing is leasable and no attempt
	// is in flight: with one worker on a run, the run is then done.
	ExitWhenIdle bool
	Logger       *slog.Logger
	// OnOutcome, when set, is called (serialised) with the outcome of each
	// attempt the worker recorded, final = false for one retried.
	OnOutcome func(o *Outcome, final bool)
	// OnUnrecorded, when set, is called when an attempt's outcome could
	// not be recorded (other than a lost lease): the trial stays unfinished.
	OnUnrecorded func(l *Lease, err error)
	// OnInFlight, when set, is called with the number of attempts in
	// flight each time it changes (for live progress: trials running).
	OnInFlight func(n int)
	// Budget, when set, is the run's spend cap (a worker of one run, as in
	// embedded mode): once it says Stopped the worker leases no further
	// attempt, lets those in flight finish, and (ExitWhenIdle) returns,
	// the run's other trials left pending for a resume.
	Budget *Budget
}

// Run leases and runs attempts until ctx is done (or, with ExitWhenIdle,
// until there is nothing left). Attempts cut short by ctx stay leased and
// unfinished: the sweeper (or resume) gives them to another attempt. Plans
// are closed when Run returns.
func (w *Worker) Run(ctx context.Context) error {
	slots := w.Slots
	if slots <= 0 {
		slots = 2 * runtime.NumCPU()
	}
	ttl := w.ttl()
	poll := w.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	plans := &planCache{plans: w.Plans}
	defer plans.close()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inFlight int
		// freed wakes the loop when an attempt ends (a signal: one
		// pending wake-up is enough).
		freed = make(chan struct{}, 1)
		outMu sync.Mutex
		// stopLogged: the budget's stop is logged once.
		stopLogged bool
	)
	defer wg.Wait()
	for {
		if ctx.Err() != nil {
			return nil
		}
		mu.Lock()
		busy := inFlight
		mu.Unlock()
		if busy >= slots {
			select {
			case <-freed:
			case <-ctx.Done():
			}
			continue
		}
		var (
			l   *Lease
			err error
		)
		if w.budgetStop(&stopLogged) == "" { // stopped: nothing to lease
			l, err = w.Queue.Lease(ctx, LeaseRequest{Worker: w.Name, TTL: ttl, Runs: w.Runs})
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.logger().Warn("leasing a trial", "err", err)
			l = nil
		}
		if l == nil {
			if err == nil && w.ExitWhenIdle && busy == 0 {
				return nil
			}
			// Nothing now: wait for a slot to finish (it may queue a retry)
			// or for the poll interval (other submitters, the sweeper).
			t := time.NewTimer(poll)
			select {
			case <-freed:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		p, err := plans.get(ctx, l.RunID)
		if err != nil {
			// The run cannot be planned here (a spec this worker cannot
			// serve): an infrastructure error of the attempt, never retried
			// by this worker's plan cache, so it fails fast and visibly.
			w.fail(ctx, l, fmt.Errorf("planning run %s on worker %s: %w", l.RunID, w.Name, err))
			continue
		}
		mu.Lock()
		inFlight++
		if w.OnInFlight != nil {
			w.OnInFlight(inFlight)
		}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, final := w.attempt(ctx, p, l)
			if o != nil && w.Budget != nil {
				// Counted before the slot frees, so the next lease sees it.
				w.Budget.Add(o)
			}
			if o != nil && w.OnOutcome != nil {
				outMu.Lock()
				w.OnOutcome(o, final)
				outMu.Unlock()
			}
			mu.Lock()
			inFlight--
			if w.OnInFlight != nil {
				w.OnInFlight(inFlight)
			}
			mu.Unlock()
			select {
			case freed <- struct{}{}:
			default:
			}
		}()
	}
}

// budgetStop is why the budget lets no further attempt start, "" when
// it lets one (or there is no budget). It logs the stop once.
func (w *Worker) budgetStop(logged *bool) string {
	if w.Budget == nil {
		return ""
	}
	reason := w.Budget.Stopped()
	if reason != "" && !*logged {
		*logged = true
		spent := w.Budget.Spent()
		w.logger().Info("no further trial starts: "+reason, "spent_usd", spent.CostUSD, "spent_tokens", spent.Usage.Total())
	}
	return reason
}

func (w *Worker) ttl() time.Duration {
	if w.TTL > 0 {
		return w.TTL
	}
	return 30 * time.Second
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger != nil {
		return w.Logger
	}
	return slog.Default()
}

// fail finishes a leased attempt as errored without running it.
func (w *Worker) fail(ctx context.Context, l *Lease, err error) {
	now := time.Now()
	o := &Outcome{RunID: l.RunID, RecordID: l.Record.ID, Trial: l.Trial, Attempt: l.Attempt, Status: TrialErrored,
		ErrorKind: "infra", Error: err.Error(), Spend: l.Prior, Started: now, Finished: now}
	w.logger().Error("trial errored", "run", l.RunID, "record", l.Record.ID, "trial", l.Trial, "err", err)
	if ferr := w.Queue.Finish(context.WithoutCancel(ctx), l, o, false); ferr != nil {
		w.logger().Error("recording trial end", "trial", l.TrialID, "err", ferr)
	}
}

// attempt runs one leased attempt and records it. It returns the outcome
// recorded (nil when the attempt was interrupted or its lease lost) and
// whether it is the trial's final one.
func (w *Worker) attempt(ctx context.Context, p *Plan, l *Lease) (*Outcome, bool) {
	log := w.logger().With("run", l.RunID)
	// The lease is the attempt's life: lost, the attempt stops at once.
	actx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(actx, l, stop)
	}()
	defer func() { stop(nil); <-hbDone }()

	o, retry := runAttempt(actx, log, p, l, func(ctx context.Context, evs []trajectory.Event) error {
		return w.Queue.AppendEvents(ctx, l, evs)
	})
	if cause := context.Cause(actx); errors.Is(cause, ErrLeaseLost) {
		log.Warn("lease lost; the attempt is dropped", "trial", l.TrialID, "record", l.Record.ID, "err", cause)
		return nil, false
	}
	if o == nil {
		return nil, false // interrupted: left for the sweeper or resume
	}
	if err := w.Queue.Finish(context.WithoutCancel(ctx), l, o, retry); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			log.Warn("lease lost before the attempt was recorded; another attempt runs the trial", "trial", l.TrialID, "err", err)
			return nil, false
		}
		// The store lacks this result; the lease runs out and the trial is
		// run again, so nothing is lost, only redone.
		log.Error("recording trial end", "trial", l.TrialID, "err", err)
		if w.OnUnrecorded != nil {
			w.OnUnrecorded(l, err)
		}
		return nil, false
	}
	return o, !retry
}

// heartbeat extends the lease every TTL/3 until ctx ends. A lost lease, or
// a lease that ran out while heartbeats failed, stops the attempt.
func (w *Worker) heartbeat(ctx context.Context, l *Lease, stop context.CancelCauseFunc) {
	ttl := l.TTL
	if ttl <= 0 {
		ttl = w.ttl()
	}
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := w.Queue.Heartbeat(ctx, l)
		switch {
		case err == nil:
			last = time.Now()
		case errors.Is(err, ErrLeaseLost):
			stop(err)
			return
		case ctx.Err() != nil:
			return
		case time.Since(last) >= ttl:
			stop(fmt.Errorf("%w: no heartbeat got through for %s (last error: %v)", ErrLeaseLost, ttl, err))
			return
		default:
			w.logger().Warn("heartbeat failed; retrying", "trial", l.TrialID, "err", err)
		}
	}
}

// runAttempt runs one attempt of a leased trial with the plan's runner,
// streaming its events through write. It returns nil when ctx ended
// before the attempt did, and whether the errored outcome should be retried.
func runAttempt(ctx context.Context, log *slog.Logger, p *Plan, l *Lease, write func(context.Context, []trajectory.Event) error) (*Outcome, bool) {
	lim := p.Limits
	tc := &TrialContext{RunID: l.RunID, TrialID: l.TrialID, Record: l.Record, Trial: l.Trial, Attempt: l.Attempt}
	// Events stream to the store through the journal and are also kept,
	// large texts cut, for the evaluators of this trial.
	jr := newJournal(ctx, write, l.TrialID)
	mem := newMemoryBudget(lim.Caps)
	var (
		evMu   sync.Mutex
		events []trajectory.Event
		// called sums the model calls the attempt recorded: the spend of
		// an attempt that errors before returning its usage.
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
	timeout := lim.TrialTimeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	started := time.Now()
	m := &meter{}
	tctx, cancel := context.WithTimeout(withMeter(ctx, m), timeout)
	o, err := p.Runner.RunTrial(tctx, tc)
	timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded)
	cancel()
	if ctx.Err() != nil {
		// Interrupted: the attempt stays unfinished, to be run again.
		_ = jr.flush()
		return nil, false
	}
	if o == nil {
		o = &Outcome{}
	}
	o.RunID, o.RecordID, o.Trial, o.Attempt = l.RunID, l.Record.ID, l.Trial, l.Attempt
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
	} else {
		o.Status = TrialCompleted
	}
	if ferr := jr.flush(); ferr != nil && o.Status == TrialCompleted {
		if ctx.Err() != nil {
			return nil, false // the lease was lost while writing
		}
		// Scores over a trajectory the store does not have would not be
		// reproducible: an infrastructure error, retried.
		err = ferr
		o.Status, o.ErrorKind, o.Error, o.Evaluations = TrialErrored, "infra", ferr.Error(), nil
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
	o.Spend = l.Prior.add(attemptSpend)
	retry := o.Status == TrialErrored && retryable(err) && l.RetriesUsed < lim.Retries
	if o.Status == TrialErrored {
		logTrialError(log, l, o, retry, lim.Retries)
	}
	return o, retry
}

// logTrialError logs an errored attempt: one Warn line when it is retried,
// saying so; the final error at Info only, as the run's progress and
// summary report it (on a terminal it would otherwise show twice).
func logTrialError(log *slog.Logger, l *Lease, o *Outcome, retry bool, retries int) {
	if retry {
		msg := errtext.OneLine(o.Error, 300)
		log.Warn(fmt.Sprintf("retrying trial %s #%d (attempt %d/%d): %s: %s", l.Record.ID, l.Trial, l.RetriesUsed+2, retries+1, o.ErrorKind, msg),
			"record", l.Record.ID, "trial", l.Trial, "attempt", l.Attempt, "kind", o.ErrorKind)
		return
	}
	log.Info("trial errored", "record", l.Record.ID, "trial", l.Trial, "attempt", l.Attempt, "kind", o.ErrorKind, "err", o.Error)
}

// planCache plans each run once per worker. A failed plan is not kept: the
// next lease of the run plans again (the server may have been unreachable).
type planCache struct {
	plans Plans
	mu    sync.Mutex
	byRun map[string]*planEntry
}

type planEntry struct {
	mu   sync.Mutex
	plan *Plan
}

func (c *planCache) get(ctx context.Context, runID string) (*Plan, error) {
	c.mu.Lock()
	if c.byRun == nil {
		c.byRun = map[string]*planEntry{}
	}
	e, ok := c.byRun[runID]
	if !ok {
		e = &planEntry{}
		c.byRun[runID] = e
	}
	c.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.plan != nil {
		return e.plan, nil
	}
	p, err := c.plans.Plan(ctx, runID)
	if err != nil {
		return nil, err
	}
	e.plan = p
	return p, nil
}

func (c *planCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.byRun {
		if e.plan != nil && e.plan.Close != nil {
			e.plan.Close()
		}
	}
	c.byRun = nil
}

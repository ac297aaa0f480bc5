package engine

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"evals.si/spec"
)

// RunBudget is a run's stop conditions (the spec's top-level budget, or
// --max-cost): once the run's spend reaches USD or Tokens, or WallClock
// has passed since the run (or its resume) started, no further trial
// starts. Trials in flight finish; the rest wait, pending, for a resume.
// Zero fields are no limit.
type RunBudget struct {
	USD       float64
	Tokens    int
	WallClock time.Duration
}

// RunBudgetOf is the spec's top-level budget with the caller's overrides
// (--max-cost, a resume's higher cap): a positive maxUSD or maxTokens
// replaces the spec's.
func RunBudgetOf(s *spec.Spec, maxUSD float64, maxTokens int) RunBudget {
	var b RunBudget
	if s != nil && s.Budget != nil {
		b = RunBudget{USD: s.Budget.USD, Tokens: s.Budget.Tokens, WallClock: s.Budget.WallClock.D()}
	}
	if maxUSD > 0 {
		b.USD = maxUSD
	}
	if maxTokens > 0 {
		b.Tokens = maxTokens
	}
	return b
}

// IsZero reports whether the budget limits nothing.
func (b RunBudget) IsZero() bool { return b.USD <= 0 && b.Tokens <= 0 && b.WallClock <= 0 }

// Budget tracks a run's spend against its RunBudget for the worker that
// runs the run: the worker asks Stopped before it leases an attempt and
// adds each recorded attempt's outcome. It is safe for concurrent use.
type Budget struct {
	limits RunBudget
	start  time.Time

	mu sync.Mutex
	// byTrial is each trial's spend so far (every attempt, as Outcome.Spend
	// counts it): a later attempt's outcome replaces an earlier one's.
	byTrial map[trialKey]Spend
	total   Spend
	// stopped is sticky: spend and time only grow, and a run that stopped
	// starting trials says once why.
	stopped string
}

type trialKey struct {
	record string
	trial  int
}

// NewBudget starts tracking a run against limits; the wall clock runs from
// start.
func NewBudget(limits RunBudget, start time.Time) *Budget {
	return &Budget{limits: limits, start: start, byTrial: map[trialKey]Spend{}}
}

// Limits are the budget's limits.
func (b *Budget) Limits() RunBudget { return b.limits }

// Add counts what a trial has spent so far, from a recorded attempt's
// outcome (or a trial the store holds, on resume). Its Spend includes the
// trial's earlier attempts, so it replaces what was counted for the trial.
func (b *Budget) Add(o *Outcome) {
	s := o.Spend
	if s.Usage.Total() == 0 && s.CostUSD == 0 {
		s = Spend{Usage: o.Usage, CostUSD: o.CostUSD} // recorded before spend was kept
	}
	k := trialKey{o.RecordID, o.Trial}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.byTrial[k]
	b.byTrial[k] = s
	b.total.Usage.InputTokens += s.Usage.InputTokens - old.Usage.InputTokens
	b.total.Usage.OutputTokens += s.Usage.OutputTokens - old.Usage.OutputTokens
	b.total.CostUSD += s.CostUSD - old.CostUSD
}

// Spent is the run's spend counted so far.
func (b *Budget) Spent() Spend {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Stopped says why no further trial may start ("budget $0.50 reached"),
// or "" while trials may start (and for a nil Budget).
func (b *Budget) Stopped() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped != "" {
		return b.stopped
	}
	l := b.limits
	switch {
	case l.USD > 0 && b.total.CostUSD >= l.USD-1e-12:
		// The tolerance keeps a sum of float costs that equals the cap
		// (0.1+0.2 against 0.3) from running one trial too many.
		b.stopped = "budget " + FormatUSD(l.USD) + " reached"
	case l.Tokens > 0 && b.total.Usage.Total() >= l.Tokens:
		b.stopped = fmt.Sprintf("budget %d tokens reached", l.Tokens)
	case l.WallClock > 0 && time.Since(b.start) >= l.WallClock:
		b.stopped = fmt.Sprintf("wall_clock %s reached", l.WallClock)
	}
	return b.stopped
}

// Label is the status a person reads: for a run its budget stopped,
// "stopped: budget $0.50 reached, 4 trials not started"; otherwise
// StatusLabel's.
func (s *Summary) Label() string {
	if s.Stopped != "" {
		return StoppedLabel(s.Stopped, s.NotStarted)
	}
	return StatusLabel(s.Status, s.Records*s.Trials-s.NotStarted, s.Errored)
}

// StoppedLabel is how a run stopped by its budget reads: the reason and
// how many trials it did not start.
func StoppedLabel(reason string, notStarted int) string {
	return fmt.Sprintf("stopped: %s, %s not started", reason, plural(notStarted, "trial"))
}

// ResumeHint says how to run the trials a stop (Summary.Stopped) left:
// a higher cap for a spend stop, a plain resume for the wall clock (it
// runs again from each resume).
func ResumeHint(reason, runID string) string {
	switch {
	case strings.HasPrefix(reason, "wall_clock"):
		return "resume to run them: evalsi runs resume " + runID
	case strings.HasSuffix(reason, "tokens reached"):
		return "resume with a higher cap: evalsi runs resume " + runID + " --max-tokens N"
	}
	return "resume with a higher cap: evalsi runs resume " + runID + " --max-cost USD"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// FormatUSD prints an amount of dollars for people: cents when that is
// exact ($0.50, $12.00), else up to four significant digits ($0.0042).
func FormatUSD(usd float64) string {
	if math.Abs(usd*100-math.Round(usd*100)) < 1e-6 || math.Abs(usd) >= 100 {
		return "$" + strconv.FormatFloat(usd, 'f', 2, 64)
	}
	return "$" + strconv.FormatFloat(usd, 'g', 4, 64)
}

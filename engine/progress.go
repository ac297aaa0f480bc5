package engine

import (
	"slices"
	"sync"
	"time"

	"evals.si/model"
	"evals.si/spec"
)

// Tracker keeps live progress of one run from the outcomes of its trials
// (earlier ones of a resumed run first), for displays.
type Tracker struct {
	mu    sync.Mutex
	pass  string
	start time.Time
	prog  Progress
	// providers reports the model providers' adaptive limits, if known.
	providers func() []model.LimiterState
}

// NewTracker tracks a run of total trials, counting pass as passing.
func NewTracker(total int, pass string, providers func() []model.LimiterState) *Tracker {
	return &Tracker{pass: pass, start: time.Now(), prog: Progress{Total: total}, providers: providers}
}

// Add counts a finished trial and returns the progress after it.
func (t *Tracker) Add(o *Outcome) Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prog.Done++
	if o.Status == TrialErrored {
		t.prog.Errored++
	} else if passed(o, t.pass) {
		t.prog.Passing++
	}
	t.prog.CostUSD += o.CostUSD
	t.prog.Elapsed = time.Since(t.start)
	t.prog.Last = o
	if t.providers != nil {
		t.prog.Providers = t.providers()
	}
	return t.prog
}

// SetRunning records how many trials are in flight and returns the
// progress, with no trial just finished (Last nil).
func (t *Tracker) SetRunning(n int) Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prog.Running = n
	t.prog.Elapsed = time.Since(t.start)
	p := t.prog
	p.Last = nil
	return p
}

// SortOutcomes puts outcomes in plan order (trial, then record order), so a
// run's summary does not depend on scheduling (float sums are
// order-sensitive) and a resumed or distributed run sums exactly like an
// uninterrupted embedded one.
func SortOutcomes(outcomes []*Outcome, records []spec.Record) {
	order := make(map[string]int, len(records))
	for i, r := range records {
		order[r.ID] = i
	}
	slices.SortStableFunc(outcomes, func(a, b *Outcome) int {
		if a.Trial != b.Trial {
			return a.Trial - b.Trial
		}
		return order[a.RecordID] - order[b.RecordID]
	})
}

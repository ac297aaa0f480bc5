package engine

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"evals.si/spec"
	"evals.si/trajectory"
)

// Caps on what the engine holds in memory per trial attempt. Events are
// streamed to the store; these bound what waits to be written. The copy
// evaluators read is bounded by the spec's caps (see memoryBudget).
const (
	// maxQueuedEvents and maxQueuedBytes bound the events waiting to be
	// written: a trial that emits faster than the store writes waits.
	maxQueuedEvents = 256
	maxQueuedBytes  = 8 << 20
	// overBudgetEventText is what the in-memory copy keeps of each large
	// text once the attempt's texts have reached caps.trial_memory_mb: the
	// head says what the event was about, the store has the rest.
	overBudgetEventText = 1 << 10
	// journalLinger is how long the writer lets events gather before it
	// writes them, unless the queue is half full or the trial flushes: a
	// trial's events come in bursts a few milliseconds apart, and each
	// write is a transaction with an fsync, so a trivial trial's dozen
	// events make two or three writes instead of one each. A viewer
	// following a live trial sees them that much later.
	journalLinger = 50 * time.Millisecond
)

// journal writes one trial attempt's events through write in order, off
// the trial's path: emitting queues the event and returns, a writer drains
// the queue in batches. Durability is per trial, not per event: flush waits
// for every event before the trial is finished, and a trial a crash cuts
// short is rerun from the start by resume, so nothing is lost by writing
// its events a little later.
type journal struct {
	// write appends a batch in one durable write (one fsync, one request).
	write   func(ctx context.Context, evs []trajectory.Event) error
	trialID string
	ctx     context.Context

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []trajectory.Event
	bytes  int
	closed bool
	err    error
	done   chan struct{}
	// hurry wakes a lingering writer: the queue is half full, or the
	// trial flushes.
	hurry chan struct{}
	// linger is journalLinger; tests shorten it.
	linger time.Duration
}

func newJournal(ctx context.Context, write func(context.Context, []trajectory.Event) error, trialID string) *journal {
	// The writes outlive a canceled attempt only as far as the lease lets
	// them: a lost lease makes the queue refuse them.
	j := &journal{write: write, trialID: trialID, ctx: context.WithoutCancel(ctx), done: make(chan struct{}),
		hurry: make(chan struct{}, 1), linger: journalLinger}
	j.cond = sync.NewCond(&j.mu)
	go j.run()
	return j
}

// add queues an event, waiting while the queue is full. It returns the
// first write error, so a trial whose trajectory cannot be recorded stops.
func (j *journal) add(ev trajectory.Event) error {
	size := textSize(ev)
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.err == nil && len(j.queue) > 0 && (len(j.queue) >= maxQueuedEvents || j.bytes+size > maxQueuedBytes) {
		j.cond.Wait()
	}
	if j.err != nil {
		return j.err
	}
	if j.closed {
		return fmt.Errorf("recording a %s event of trial %s after the trial ended", ev.Kind, j.trialID)
	}
	j.queue = append(j.queue, ev)
	j.bytes += size
	j.cond.Broadcast()
	if len(j.queue) >= maxQueuedEvents/2 || j.bytes >= maxQueuedBytes/2 {
		j.wake()
	}
	return nil
}

// wake tells a lingering writer to write now; it never blocks.
func (j *journal) wake() {
	select {
	case j.hurry <- struct{}{}:
	default:
	}
}

func (j *journal) run() {
	defer close(j.done)
	for {
		j.mu.Lock()
		for len(j.queue) == 0 && !j.closed {
			j.cond.Wait()
		}
		if len(j.queue) == 0 {
			j.mu.Unlock()
			return
		}
		if d := j.linger; !j.closed && d > 0 && j.err == nil {
			j.mu.Unlock()
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-j.hurry:
				t.Stop()
			}
			j.mu.Lock()
		}
		batch, failed := j.queue, j.err != nil
		j.queue, j.bytes = nil, 0
		j.cond.Broadcast()
		j.mu.Unlock()
		if failed {
			continue // drop: the trial is failing already
		}
		if err := j.write(j.ctx, batch); err != nil {
			j.mu.Lock()
			j.err = fmt.Errorf("recording the trajectory: %w", err)
			j.cond.Broadcast()
			j.mu.Unlock()
		}
	}
}

// flush waits until every queued event is written, stops the writer, and
// returns the first write error.
func (j *journal) flush() error {
	j.mu.Lock()
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
	j.wake()
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// textSize estimates an event's size by its large text fields.
func textSize(ev trajectory.Event) int {
	n := 256
	if m := ev.Message; m != nil {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Arguments)
		}
	}
	if tc := ev.ToolCall; tc != nil {
		n += len(tc.Arguments)
	}
	if r := ev.ToolResult; r != nil {
		n += len(r.Output)
	}
	if l := ev.Log; l != nil {
		n += len(l.Text)
	}
	if c := ev.Checker; c != nil {
		n += len(c.Output)
	}
	return n
}

// memoryBudget decides how much of each event's large text fields (tool
// output, message content, log text, checker output) one trial attempt keeps
// in the copy evaluators read: each is cut at caps.event_text_kb, and once
// the texts kept reach caps.trial_memory_mb, at overBudgetEventText, so a
// trial of many events cannot grow the engine without bound. Cut texts end
// with a note. The store gets every event whole. Tool-call arguments are kept
// whole: evaluators compare them as JSON, and the model response cap bounds
// them.
//
// A memoryBudget is not safe for concurrent use; the trial's sink calls it
// under its lock.
type memoryBudget struct {
	perText int
	total   int64
	used    int64
}

func newMemoryBudget(c *spec.Caps) *memoryBudget {
	return &memoryBudget{perText: c.EventTextBytes(), total: c.TrialMemoryBytes()}
}

// forMemory returns the copy of ev kept for evaluators and counts what it
// keeps. An event whose texts are kept whole is returned as it is.
func (b *memoryBudget) forMemory(ev trajectory.Event) trajectory.Event {
	ev.Message = keepIn(b, ev.Message, func(m *trajectory.Message) *string { return &m.Content })
	if r := keepIn(b, ev.ToolResult, func(r *trajectory.ToolResult) *string { return &r.Output }); r != ev.ToolResult {
		r.Truncated = true
		ev.ToolResult = r
	}
	ev.Log = keepIn(b, ev.Log, func(l *trajectory.Log) *string { return &l.Text })
	ev.Checker = keepIn(b, ev.Checker, func(c *trajectory.Checker) *string { return &c.Output })
	return ev
}

// keepIn returns p, or a copy of it whose text is cut, when the budget cuts
// that text; p itself (which the store gets) is never changed.
func keepIn[T any](b *memoryBudget, p *T, text func(*T) *string) *T {
	if p == nil {
		return nil
	}
	s, cut := b.keep(*text(p))
	if !cut {
		return p
	}
	c := *p
	*text(&c) = s
	return &c
}

// keep returns what the copy keeps of s, and whether that is less than s.
func (b *memoryBudget) keep(s string) (string, bool) {
	limit, why := b.perText, ""
	if b.used >= b.total && limit > overBudgetEventText {
		limit, why = overBudgetEventText, " (this trial's texts reached caps.trial_memory_mb)"
	}
	if len(s) <= limit {
		b.used += int64(len(s))
		return s, false
	}
	for limit > 0 && !utf8.RuneStart(s[limit]) {
		limit-- // cut between characters, not inside one
	}
	kept := s[:limit] + fmt.Sprintf("\n[… %d bytes cut in the engine's in-memory copy%s; the stored trajectory has them]", len(s)-limit, why)
	b.used += int64(len(kept))
	return kept, true
}

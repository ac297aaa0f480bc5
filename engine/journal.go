package engine

import (
	"context"
	"fmt"
	"sync"

	"evals.si/trajectory"
)

// EventBatcher is implemented by recorders that append several events of
// a trial in one durable write. The journal uses it when it can: one write
// (one fsync) per batch instead of one per event.
type EventBatcher interface {
	AppendEvents(ctx context.Context, trialID string, evs []trajectory.Event) error
}

// Caps on what the engine holds in memory per trial attempt. Events are
// streamed to the store; these bound what waits to be written and the copy
// evaluators read.
const (
	// maxQueuedEvents and maxQueuedBytes bound the events waiting to be
	// written: a trial that emits faster than the store writes waits.
	maxQueuedEvents = 256
	maxQueuedBytes  = 8 << 20
	// MaxEventTextInMemory caps each large text field (tool output, message
	// content, log text, checker output) of the copy of an event kept for
	// evaluators; the store keeps the event whole. Tool output is already
	// capped at 1 MiB per stream by the sandboxes.
	MaxEventTextInMemory = 64 << 10
)

// journal writes one trial attempt's events to the recorder in order, off
// the trial's path: emitting queues the event and returns, a writer drains
// the queue in batches. Durability is per trial, not per event: flush waits
// for every event before the trial is finished, and a trial a crash cuts
// short is rerun from the start by resume, so nothing is lost by writing
// its events a little later.
type journal struct {
	rec     Recorder
	batch   EventBatcher // nil: one AppendEvent per event
	trialID string
	ctx     context.Context

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []trajectory.Event
	bytes  int
	closed bool
	err    error
	done   chan struct{}
}

func newJournal(ctx context.Context, rec Recorder, trialID string) *journal {
	j := &journal{rec: rec, trialID: trialID, ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
	j.batch, _ = rec.(EventBatcher)
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
	return nil
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
		batch, failed := j.queue, j.err != nil
		j.queue, j.bytes = nil, 0
		j.cond.Broadcast()
		j.mu.Unlock()
		if failed {
			continue // drop: the trial is failing already
		}
		if err := j.write(batch); err != nil {
			j.mu.Lock()
			j.err = fmt.Errorf("recording the trajectory: %w", err)
			j.cond.Broadcast()
			j.mu.Unlock()
		}
	}
}

func (j *journal) write(batch []trajectory.Event) error {
	if j.batch != nil {
		return j.batch.AppendEvents(j.ctx, j.trialID, batch)
	}
	for _, ev := range batch {
		if err := j.rec.AppendEvent(j.ctx, j.trialID, ev); err != nil {
			return err
		}
	}
	return nil
}

// flush waits until every queued event is written, stops the writer, and
// returns the first write error.
func (j *journal) flush() error {
	j.mu.Lock()
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
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

// forMemory returns the copy of an event kept for evaluators, its large
// text fields cut at MaxEventTextInMemory.
func forMemory(ev trajectory.Event) trajectory.Event {
	cut := func(s string) string {
		if len(s) <= MaxEventTextInMemory {
			return s
		}
		return s[:MaxEventTextInMemory] + fmt.Sprintf("\n[… %d bytes cut in the engine's in-memory copy; the stored trajectory has them]", len(s)-MaxEventTextInMemory)
	}
	if m := ev.Message; m != nil && len(m.Content) > MaxEventTextInMemory {
		c := *m
		c.Content = cut(c.Content)
		ev.Message = &c
	}
	if r := ev.ToolResult; r != nil && len(r.Output) > MaxEventTextInMemory {
		c := *r
		c.Output = cut(c.Output)
		c.Truncated = true
		ev.ToolResult = &c
	}
	if l := ev.Log; l != nil && len(l.Text) > MaxEventTextInMemory {
		c := *l
		c.Text = cut(c.Text)
		ev.Log = &c
	}
	if ch := ev.Checker; ch != nil && len(ch.Output) > MaxEventTextInMemory {
		c := *ch
		c.Output = cut(c.Output)
		ev.Checker = &c
	}
	return ev
}

package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"evals.si/spec"
	"evals.si/trajectory"
)

// batchRecorder keeps what the journal writes; block holds writes until
// released, to fill the queue.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]trajectory.Event
	block   chan struct{}
	err     error
}

func (r *batchRecorder) StartRun(context.Context, RunStart) (string, error) { return "r", nil }
func (r *batchRecorder) FinishRun(context.Context, string, string, *Summary, string) error {
	return nil
}
func (r *batchRecorder) StartTrial(context.Context, string, spec.Record, int, int) (string, error) {
	return "t", nil
}
func (r *batchRecorder) FinishTrial(context.Context, string, *Outcome) error { return nil }
func (r *batchRecorder) AppendEvent(ctx context.Context, id string, e trajectory.Event) error {
	return r.AppendEvents(ctx, id, []trajectory.Event{e})
}

func (r *batchRecorder) AppendEvents(_ context.Context, _ string, evs []trajectory.Event) error {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.batches = append(r.batches, evs)
	return nil
}

func logEv(seq int) trajectory.Event {
	return trajectory.Event{Seq: seq, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "x"}}
}

func TestJournalWritesInOrderInBatches(t *testing.T) {
	rec := &batchRecorder{block: make(chan struct{})}
	j := newJournal(context.Background(), rec, "t")
	const n = 3 * maxQueuedEvents
	added := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			if err := j.add(logEv(i)); err != nil {
				added <- err
				return
			}
		}
		added <- nil
	}()
	close(rec.block)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if err := j.flush(); err != nil {
		t.Fatal(err)
	}
	seq := 0
	for _, b := range rec.batches {
		if len(b) > maxQueuedEvents {
			t.Errorf("a batch of %d events; the queue holds at most %d", len(b), maxQueuedEvents)
		}
		for _, e := range b {
			seq++
			if e.Seq != seq {
				t.Fatalf("event %d written as number %d", e.Seq, seq)
			}
		}
	}
	if seq != n || len(rec.batches) >= n {
		t.Errorf("%d events in %d batches; want %d events batched", seq, len(rec.batches), n)
	}
	if err := j.add(logEv(n + 1)); err == nil {
		t.Error("an event was accepted after flush")
	}
}

func TestJournalReportsWriteError(t *testing.T) {
	rec := &batchRecorder{err: errors.New("disk full")}
	j := newJournal(context.Background(), rec, "t")
	_ = j.add(logEv(1))
	err := j.flush()
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("flush: %v, want the write error", err)
	}
}

// A trial whose trajectory cannot be recorded is errored, not scored.
func TestTrialWithUnrecordedTrajectoryErrors(t *testing.T) {
	rec := &batchRecorder{err: errors.New("disk full")}
	zero := 0
	e := &Engine{Recorder: rec}
	p := &Plan{
		Spec:    &spec.Spec{Trials: 1, Retries: &zero},
		Records: []spec.Record{{ID: "a"}},
		Runner: runnerFunc(func(ctx context.Context, tc *TrialContext) (*Outcome, error) {
			_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "hi"}})
			return &Outcome{Output: "ok"}, nil
		}),
	}
	sum, err := e.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 1 || sum.ErrorsByKind["infra"] != 1 {
		t.Errorf("summary %+v, want the trial errored (infra)", sum)
	}
}

type runnerFunc func(ctx context.Context, tc *TrialContext) (*Outcome, error)

func (f runnerFunc) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	return f(ctx, tc)
}

func TestForMemoryCutsLargeTexts(t *testing.T) {
	big := strings.Repeat("y", MaxEventTextInMemory+10)
	ev := trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: big}}
	got := forMemory(ev)
	if len(got.ToolResult.Output) > MaxEventTextInMemory+200 || !got.ToolResult.Truncated || !strings.Contains(got.ToolResult.Output, "10 bytes cut") {
		t.Errorf("in-memory copy: %d bytes, truncated %v", len(got.ToolResult.Output), got.ToolResult.Truncated)
	}
	if ev.ToolResult.Output != big {
		t.Error("forMemory changed the event written to the store")
	}
	small := trajectory.Event{Kind: trajectory.KindMessage, Message: &trajectory.Message{Content: "hi"}}
	if forMemory(small).Message != small.Message {
		t.Error("a small event was copied")
	}
}

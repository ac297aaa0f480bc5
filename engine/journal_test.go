package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"evals.si/sandbox"
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

func (r *batchRecorder) write(ctx context.Context, evs []trajectory.Event) error {
	return r.AppendEvents(ctx, "t", evs)
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
	j := newJournal(context.Background(), rec.write, "t")
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

// A trial's burst of events is one write, and events nobody flushes are
// written once the linger passes.
func TestJournalLingers(t *testing.T) {
	rec := &batchRecorder{}
	j := newJournal(context.Background(), rec.write, "t")
	setLinger(j, time.Hour) // only the flush may write the burst
	for i := 1; i <= 12; i++ {
		if err := j.add(logEv(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.flush(); err != nil {
		t.Fatal(err)
	}
	if got := len(rec.batches); got != 1 {
		t.Errorf("12 events in %d writes; want one", got)
	}

	rec2 := &batchRecorder{}
	j2 := newJournal(context.Background(), rec2.write, "t")
	setLinger(j2, 10*time.Millisecond)
	if err := j2.add(logEv(1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec2.mu.Lock()
		n := len(rec2.batches)
		rec2.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an event was never written without a flush")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := j2.flush(); err != nil {
		t.Fatal(err)
	}
}

// setLinger sets j's linger under its lock: its writer is already running.
func setLinger(j *journal, d time.Duration) {
	j.mu.Lock()
	j.linger = d
	j.mu.Unlock()
}

func TestJournalReportsWriteError(t *testing.T) {
	rec := &batchRecorder{err: errors.New("disk full")}
	j := newJournal(context.Background(), rec.write, "t")
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
	p := &Plan{
		Spec: &spec.Spec{Trials: 1, Retries: &zero}, Limits: LimitsOf(&spec.Spec{Trials: 1, Retries: &zero}),
		Records: []spec.Record{{ID: "a"}},
		Runner: runnerFunc(func(ctx context.Context, tc *TrialContext) (*Outcome, error) {
			_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "hi"}})
			return &Outcome{Output: "ok"}, nil
		}),
	}
	sum := runPlan(t, rec, p)
	if sum.Errored != 1 || sum.ErrorsByKind["infra"] != 1 {
		t.Errorf("summary %+v, want the trial errored (infra)", sum)
	}
}

type runnerFunc func(ctx context.Context, tc *TrialContext) (*Outcome, error)

func (f runnerFunc) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	return f(ctx, tc)
}

func TestForMemoryCutsLargeTexts(t *testing.T) {
	limit := spec.DefaultEventTextKB << 10
	big := strings.Repeat("y", limit+10)
	ev := trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: big}}
	got := newMemoryBudget(nil).forMemory(ev)
	if len(got.ToolResult.Output) > limit+200 || !got.ToolResult.Truncated || !strings.Contains(got.ToolResult.Output, "10 bytes cut") {
		t.Errorf("in-memory copy: %d bytes, truncated %v", len(got.ToolResult.Output), got.ToolResult.Truncated)
	}
	if ev.ToolResult.Output != big {
		t.Error("forMemory changed the event written to the store")
	}
	small := trajectory.Event{Kind: trajectory.KindMessage, Message: &trajectory.Message{Content: "hi"}}
	if newMemoryBudget(nil).forMemory(small).Message != small.Message {
		t.Error("a small event was copied")
	}
}

// repeat is n copies of v.
func repeat[T any](n int, v T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Each text is cut at event_text_kb; once a trial attempt's texts reach
// trial_memory_mb, each further one is kept to 1 KiB.
func TestMemoryBudget(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	type kept struct {
		n      int  // bytes of the text kept before the note
		budget bool // the note blames the trial's budget
	}
	whole := func(n int) kept { return kept{n: n} }
	for _, tc := range []struct {
		name  string
		caps  *spec.Caps
		texts []int // sizes, in emit order
		want  []kept
	}{
		{"defaults, small texts", nil, []int{10, 100}, []kept{whole(10), whole(100)}},
		{"defaults, one text over event_text_kb", nil, []int{64*kib + 10, 64 * kib}, []kept{{n: 64 * kib}, whole(64 * kib)}},
		{"event_text_kb set", &spec.Caps{EventTextKB: 4}, []int{5 * kib, 4 * kib}, []kept{{n: 4 * kib}, whole(4 * kib)}},
		{"budget reached by whole texts", &spec.Caps{EventTextKB: 4, TrialMemoryMB: 1},
			append(repeat(256, 4*kib), 4*kib, 4*kib, 512),
			append(repeat(256, whole(4*kib)), kept{kib, true}, kept{kib, true}, whole(512))},
		{"budget crossed by cut texts", &spec.Caps{TrialMemoryMB: 1},
			repeat(17, 100*kib),
			append(repeat(16, kept{n: 64 * kib}), kept{kib, true})},
		{"small texts count", &spec.Caps{TrialMemoryMB: 1},
			append(repeat(mib/100, 100), 64*kib, 2*kib),
			append(repeat(mib/100, whole(100)), whole(64*kib), kept{kib, true})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMemoryBudget(tc.caps)
			for i, n := range tc.texts {
				ev := trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: strings.Repeat("y", n)}}
				out := b.forMemory(ev).Log.Text
				w := tc.want[i]
				head, note, cut := strings.Cut(out, "\n[… ")
				got := kept{n: len(head), budget: strings.Contains(note, "caps.trial_memory_mb")}
				if got != w || cut != (w.n < n) {
					t.Fatalf("text %d (%d bytes): kept %+v (noted %v), want %+v", i, n, got, cut, w)
				}
				if cut && !strings.Contains(note, fmt.Sprintf("%d bytes cut in the engine's in-memory copy", n-w.n)) {
					t.Fatalf("text %d: note %q", i, note)
				}
			}
			// What the attempt holds stays near the budget: at most one
			// text past it at full size, then 1 KiB and a note each.
			if b.used > tc.caps.TrialMemoryBytes()+int64(tc.caps.EventTextBytes())+int64(len(tc.texts))*(kib+200) {
				t.Errorf("kept %d bytes", b.used)
			}
		})
	}
}

// A cut falls between characters, so the copy stays valid UTF-8.
func TestMemoryBudgetCutsWholeCharacters(t *testing.T) {
	b := newMemoryBudget(&spec.Caps{EventTextKB: 1})
	out := b.forMemory(trajectory.Event{Kind: trajectory.KindMessage, Message: &trajectory.Message{Content: strings.Repeat("€", 1000)}})
	head, _, _ := strings.Cut(out.Message.Content, "\n[… ")
	if !utf8.ValidString(out.Message.Content) || len(head) != 1023 {
		t.Errorf("kept %d bytes, valid UTF-8 %v", len(head), utf8.ValidString(out.Message.Content))
	}
}

// Through the engine: a trial emitting many large events keeps its
// in-memory copy within the budget, and the store gets every event whole.
func TestTrialMemoryBudgetInEngine(t *testing.T) {
	rec := &batchRecorder{}
	zero := 0
	const n, size = 300, 64 << 10
	var held int
	p := &Plan{
		Spec: &spec.Spec{Trials: 1, Retries: &zero, Caps: &spec.Caps{TrialMemoryMB: 1}}, Limits: LimitsOf(&spec.Spec{Trials: 1, Retries: &zero, Caps: &spec.Caps{TrialMemoryMB: 1}}),
		Records: []spec.Record{{ID: "a"}},
		Runner: runnerFunc(func(ctx context.Context, tc *TrialContext) (*Outcome, error) {
			for range n {
				if err := tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: strings.Repeat("y", size)}}); err != nil {
					return nil, err
				}
			}
			for _, ev := range tc.Events() {
				held += len(ev.ToolResult.Output)
			}
			return &Outcome{Output: "ok"}, nil
		}),
	}
	sum := runPlan(t, rec, p)
	if sum.Errored != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if limit := 1<<20 + size + n*(1<<10+200); held > limit {
		t.Errorf("the trial's in-memory events hold %d bytes of text, over %d", held, limit)
	}
	stored := 0
	for _, b := range rec.batches {
		for _, ev := range b {
			if len(ev.ToolResult.Output) != size {
				t.Fatalf("event %d stored with %d bytes, want %d", ev.Seq, len(ev.ToolResult.Output), size)
			}
			stored++
		}
	}
	if stored != n {
		t.Errorf("%d events stored, want %d", stored, n)
	}
}

// The spec's default command output cap is the sandboxes' own default.
func TestCommandOutputDefaultMatchesSandbox(t *testing.T) {
	if got := (*spec.Caps)(nil).CommandOutputBytes(); got != sandbox.DefaultOutputLimit {
		t.Errorf("caps.command_output_kb defaults to %d bytes, sandbox.DefaultOutputLimit is %d", got, sandbox.DefaultOutputLimit)
	}
}

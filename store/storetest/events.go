package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/store"
	"evals.si/trajectory"
)

// eventsRoundTrip: every kind of event reads back as appended, with its
// seq, and its time in UTC to the nanosecond.
func eventsRoundTrip(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	at := time.Date(2026, 11, 29, 8, 53, 1, 123456789, time.FixedZone("CET", 3600))
	exit := 3
	in := []trajectory.Event{
		{Kind: trajectory.KindMessage, Time: at, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: "fix the bug"}},
		{Kind: trajectory.KindModelCall, Time: at, Step: 1, DurationMS: 812, ModelCall: &trajectory.ModelCall{Model: "m", Usage: trajectory.Usage{InputTokens: 10, OutputTokens: 5}, CostUSD: 0.001}},
		{Kind: trajectory.KindToolCall, Time: at, Step: 1, ToolCall: &trajectory.ToolCall{ID: "c1", Name: "bash", Arguments: json.RawMessage(`{"cmd":"ls"}`)}},
		{Kind: trajectory.KindToolResult, Time: at, Step: 1, ToolResult: &trajectory.ToolResult{CallID: "c1", Name: "bash", Output: "a\nb", ExitCode: &exit, IsError: true}},
		{Kind: trajectory.KindPolicy, Time: at, Policy: &trajectory.Policy{Kind: "network", Host: "example.com"}},
		{Kind: trajectory.KindEscalation, Time: at, Escalation: &trajectory.Escalation{Kind: "network", Granted: false}},
		{Kind: trajectory.KindChecker, Time: at, Checker: &trajectory.Checker{Command: []string{"pytest"}, Pass: true, Score: 1}},
		{Kind: trajectory.KindStop, Time: at, Stop: &trajectory.Stop{Reason: "answered"}},
		{Kind: trajectory.KindError, Time: at, Error: &trajectory.Error{Kind: "infra", Message: "x"}},
	}
	for _, e := range in {
		s.must("AppendEvent", s.b.AppendEvent(ctx, l.TrialID, e))
	}
	got := s.events(l.TrialID)
	if len(got) != len(in) {
		t.Fatalf("got %d events, want %d", len(got), len(in))
	}
	for i := range in {
		want := in[i]
		want.Seq = i + 1
		want.Time = at.UTC()
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

// eventsSeqAndPaging: seqs are assigned from 1, explicit seqs are kept and
// a taken one refused, automatic ones follow the highest; paging by
// afterSeq and limit; a zero time is stamped now, in UTC.
func eventsSeqAndPaging(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	before := time.Now()
	for i := range 10 {
		s.must("AppendEvent", s.b.AppendEvent(ctx, l.TrialID, logEv(fmt.Sprint(i))))
	}
	s.must("AppendEvent seq 20", s.b.AppendEvent(ctx, l.TrialID, trajectory.Event{Seq: 20, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "20"}}))
	if err := s.b.AppendEvent(ctx, l.TrialID, trajectory.Event{Seq: 5, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "dup"}}); err == nil || !strings.Contains(err.Error(), "seq 5 is already recorded") {
		t.Errorf("duplicate seq: err = %v", err)
	}
	s.must("AppendEvent", s.b.AppendEvent(ctx, l.TrialID, logEv("21")))
	tests := []struct {
		after, limit int
		want         []int
	}{
		{0, 0, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21}},
		{0, 3, []int{1, 2, 3}},
		{3, 3, []int{4, 5, 6}},
		{9, 0, []int{10, 20, 21}},
		{21, 0, nil},
		{-5, 2, []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("after%d_limit%d", tt.after, tt.limit), func(t *testing.T) {
			es, err := s.b.Events(ctx, l.TrialID, tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := seqs(es); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Events(after %d, limit %d) = %v, want %v", tt.after, tt.limit, got, tt.want)
			}
		})
	}
	es, _ := s.b.Events(ctx, l.TrialID, 0, 1)
	if len(es) != 1 || es[0].Log.Text != "0" || es[0].Time.Before(before.Add(-time.Second)) || es[0].Time.Location() != time.UTC {
		t.Errorf("first event = %+v; want text 0 and a UTC time stamped at append", es)
	}
	if n, err := s.b.CountEvents(ctx, l.TrialID); err != nil || n != 12 {
		t.Errorf("CountEvents = %d, %v; want 12", n, err)
	}
	for _, bad := range []trajectory.Event{{Log: &trajectory.Log{Text: "no kind"}}, {Seq: -1, Kind: trajectory.KindLog}} {
		if err := s.b.AppendEvent(ctx, l.TrialID, bad); err == nil {
			t.Errorf("AppendEvent(%+v) succeeded, want an error", bad)
		}
	}
}

// eventsLargePayload: an event whose JSON exceeds InlineLimit is kept in a
// blob (the blob named by the digest of that JSON exists) and reads back
// whole, in its place among small events, through every append path.
func eventsLargePayload(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	big := func(tag string) trajectory.Event {
		out := tag + strings.Repeat("line of tool output\n", store.InlineLimit/10)
		return trajectory.Event{Kind: trajectory.KindToolResult, Time: at, ToolResult: &trajectory.ToolResult{CallID: "c", Name: "bash", Output: out}}
	}
	evs := []trajectory.Event{big("append"), logEv("small"), big("batch"), big("leased")}
	s.must("AppendEvent", s.b.AppendEvent(ctx, l.TrialID, evs[0]))
	s.must("AppendEvents", s.b.AppendEvents(ctx, l.TrialID, evs[1:3]))
	s.must("AppendLeased", s.b.AppendLeased(ctx, l, evs[3:]))
	for _, i := range []int{0, 2, 3} {
		// The payload is the event's JSON as appended (seq not yet set).
		b, err := json.Marshal(evs[i])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		if n, err := s.b.BlobSize(ctx, d); err != nil || n != int64(len(b)) {
			t.Errorf("event %d: its payload blob %s: size %d, %v; want %d", i, d, n, err, len(b))
		}
	}
	got := s.events(l.TrialID)
	if len(got) != len(evs) {
		t.Fatalf("%d events read back, want %d", len(got), len(evs))
	}
	for i := range evs {
		want := evs[i]
		want.Seq = i + 1
		if want.Time.IsZero() {
			want.Time = got[i].Time
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("event %d read back differs (seq %d, kind %s)", i, got[i].Seq, got[i].Kind)
		}
	}
}

// eventsBatch: a batch is numbered after the last seq, keeps given seqs,
// and is refused whole when one seq is taken or one event is bad.
func eventsBatch(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	big := trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: strings.Repeat("x", store.InlineLimit+1)}}
	s.must("AppendEvents", s.b.AppendEvents(ctx, l.TrialID, []trajectory.Event{logEv("one"), big, logEv("three")}))
	s.must("AppendEvents", s.b.AppendEvents(ctx, l.TrialID, []trajectory.Event{{Seq: 10, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "ten"}}}))
	got := s.events(l.TrialID)
	if !reflect.DeepEqual(seqs(got), []int{1, 2, 3, 10}) || got[1].ToolResult == nil || got[1].ToolResult.Output != big.ToolResult.Output || got[2].Log.Text != "three" {
		t.Fatalf("events = %v", seqs(got))
	}
	err := s.b.AppendEvents(ctx, l.TrialID, []trajectory.Event{{Seq: 11, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "new"}}, {Seq: 10, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "dup"}}})
	if err == nil || !strings.Contains(err.Error(), "already recorded") {
		t.Fatalf("duplicate seq: err = %v", err)
	}
	if err := s.b.AppendEvents(ctx, l.TrialID, []trajectory.Event{logEv("ok"), {Kind: ""}}); err == nil {
		t.Error("a batch with an event without a kind was appended")
	}
	if err := s.b.AppendLeased(ctx, l, []trajectory.Event{logEv("ok"), {Seq: 1, Kind: trajectory.KindLog}}); err == nil {
		t.Error("a leased batch with a taken seq was appended")
	}
	if n, _ := s.b.CountEvents(ctx, l.TrialID); n != 4 {
		t.Errorf("after refused batches: %d events, want 4", n)
	}
	s.must("AppendEvents of none", s.b.AppendEvents(ctx, l.TrialID, nil))
}

// eventsConcurrent: many goroutines appending to one attempt, and to one
// attempt each with readers tailing, all succeed, with gapless seqs.
func eventsConcurrent(t *testing.T, s *suite) {
	const workers, perWorker = 16, 10
	ctx := t.Context()
	r, l := s.trial()
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if err := s.b.AppendEvent(ctx, l.TrialID, logEv(fmt.Sprintf("%d/%d", w, i))); err != nil {
					errs <- err
				}
			}
		})
	}
	// One attempt each, leased from the same run, with a reader alongside.
	own := make([]store.Lease, workers)
	for w := range workers {
		own[w] = s.leaseIn(r.ID, fmt.Sprintf("rec-own-%02d", w))
	}
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if err := s.b.AppendLeased(ctx, own[w], []trajectory.Event{logEv(fmt.Sprint(i))}); err != nil {
					errs <- err
				}
				if _, err := s.b.Events(ctx, own[w].TrialID, i-1, 0); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	es := s.events(l.TrialID)
	if len(es) != workers*perWorker {
		t.Fatalf("%d events on the shared attempt, want %d", len(es), workers*perWorker)
	}
	seen := map[string]bool{}
	for i, e := range es {
		if e.Seq != i+1 || seen[e.Log.Text] {
			t.Fatalf("event %d: seq %d %q: not gapless or stored twice", i, e.Seq, e.Log.Text)
		}
		seen[e.Log.Text] = true
	}
	for w, ol := range own {
		es := s.events(ol.TrialID)
		if len(es) != perWorker {
			t.Fatalf("attempt %d has %d events, want %d", w, len(es), perWorker)
		}
		for i, e := range es {
			if e.Seq != i+1 || e.Log.Text != fmt.Sprint(i) {
				t.Fatalf("attempt %d event %d = seq %d %q", w, i, e.Seq, e.Log.Text)
			}
		}
	}
}

// eventsCanceled: a write with a canceled context fails and stores nothing.
func eventsCanceled(t *testing.T, s *suite) {
	_, l := s.trial()
	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.b.AppendEvent(cctx, l.TrialID, logEv("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendEvent with a canceled context: err = %v, want context.Canceled", err)
	}
	if err := s.b.AppendLeased(cctx, l, []trajectory.Event{logEv("x")}); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendLeased with a canceled context: err = %v, want context.Canceled", err)
	}
	if n, _ := s.b.CountEvents(t.Context(), l.TrialID); n != 0 {
		t.Errorf("canceled appends stored %d events", n)
	}
}

package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"evals.si/trajectory"
)

func TestAppendEventsBatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	big := trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: strings.Repeat("x", InlineLimit+1)}}
	batch := []trajectory.Event{logEvent("one"), big, logEvent("three")}
	if err := s.AppendEvents(ctx, tr.ID, batch); err != nil {
		t.Fatal(err)
	}
	// Zero seqs continue after the last one; given seqs are kept.
	if err := s.AppendEvents(ctx, tr.ID, []trajectory.Event{{Seq: 10, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "ten"}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, tr.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Seq != 1 || got[1].Seq != 2 || got[2].Seq != 3 || got[3].Seq != 10 ||
		got[1].ToolResult == nil || got[1].ToolResult.Output != big.ToolResult.Output || got[2].Log.Text != "three" {
		t.Fatalf("events = %+v", got)
	}

	// A batch with a taken seq is refused whole.
	err = s.AppendEvents(ctx, tr.ID, []trajectory.Event{{Seq: 11, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "new"}}, {Seq: 10, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "dup"}}})
	if err == nil || !strings.Contains(err.Error(), "already recorded") {
		t.Fatalf("duplicate seq: err = %v", err)
	}
	if n, _ := s.CountEvents(ctx, tr.ID); n != 4 {
		t.Errorf("after a refused batch: %d events, want 4", n)
	}
	if err := s.AppendEvents(ctx, tr.ID, []trajectory.Event{{Kind: ""}}); err == nil {
		t.Error("an event without a kind was appended")
	}
	if err := s.AppendEvents(ctx, "t-nope", []trajectory.Event{logEvent("x")}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing trial: err = %v, want ErrNotFound", err)
	}
}

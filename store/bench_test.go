package store

import (
	"context"
	"strings"
	"testing"

	"evals.si/trajectory"
)

// BenchmarkAppendEvent measures one durable append (a committed, fsynced
// transaction) of a typical tool result.
func BenchmarkAppendEvent(b *testing.B) {
	ctx := context.Background()
	ev := trajectory.Event{Kind: trajectory.KindToolResult, Step: 3,
		ToolResult: &trajectory.ToolResult{CallID: "c1", Name: "bash", Output: strings.Repeat("output line\n", 40)}}

	b.Run("serial", func(b *testing.B) {
		s := openTest(b)
		_, tr := newTrial(b, s)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.AppendEvent(ctx, tr.ID, ev); err != nil {
				b.Fatal(err)
			}
		}
	})

	// 32 goroutines per CPU: a run at high concurrency, where group commit
	// lets one fsync serve many trials.
	b.Run("parallel", func(b *testing.B) {
		s := openTest(b)
		r, _ := newTrial(b, s)
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			tr, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: newID("rec", r.CreatedAt)})
			if err != nil {
				b.Error(err)
				return
			}
			for pb.Next() {
				if err := s.AppendEvent(ctx, tr.ID, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

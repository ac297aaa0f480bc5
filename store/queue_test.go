package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"evals.si/store"
	"evals.si/store/storetest"
)

func openSQLite(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestQueue(t *testing.T) {
	storetest.Queue(t, func(t *testing.T) store.Backend { return openSQLite(t) })
}

// BenchmarkLeaseComplete measures one trial through the queue: a lease and
// a completion with a score, two durable transactions. parallel runs 16
// workers per CPU, where group commit shares fsyncs between them.
func BenchmarkLeaseComplete(b *testing.B) {
	ctx := context.Background()
	// setup enqueues b.N trials, untimed.
	setup := func(b *testing.B) *store.Store {
		s := openSQLite(b)
		r, err := s.CreateRun(ctx, store.RunInput{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i += 10_000 {
			var ins []store.TrialInput
			for j := i; j < min(i+10_000, b.N); j++ {
				ins = append(ins, store.TrialInput{RunID: r.ID, RecordID: fmt.Sprint(j), Record: []byte(`{"input":"2+2"}`)})
			}
			if err := s.Enqueue(ctx, r.ID, ins); err != nil {
				b.Fatal(err)
			}
		}
		return s
	}
	pass := true
	done := store.Completion{Result: store.TrialResult{Status: store.TrialFinished, Passed: &pass, Output: "4"},
		Scores: []store.Score{{Name: "exact-match", Value: 1}}}
	one := func(s *store.Store, worker string) error {
		l, err := s.Lease(ctx, store.LeaseRequest{Worker: worker, TTL: time.Minute})
		if err != nil {
			return err
		}
		return s.Complete(ctx, l, done)
	}

	b.Run("serial", func(b *testing.B) {
		s := setup(b)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := one(s, "w"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trials/s")
	})
	b.Run("parallel", func(b *testing.B) {
		s := setup(b)
		b.ReportAllocs()
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(s, "w"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trials/s")
	})
}

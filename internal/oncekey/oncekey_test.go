package oncekey

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestDo(t *testing.T) {
	var g Group
	var runs atomic.Int32
	ok := func(context.Context) error { runs.Add(1); return nil }
	fail := func(context.Context) error { runs.Add(1); return errors.New("no") }
	ctx := context.Background()
	if err := g.Do(ctx, "a", fail); err == nil || runs.Load() != 1 {
		t.Fatalf("first failing run: %v, runs %d", err, runs.Load())
	}
	// A failure is not kept: the next caller runs it again.
	if err := g.Do(ctx, "a", ok); err != nil || runs.Load() != 2 {
		t.Fatalf("retry after failure: %v, runs %d", err, runs.Load())
	}
	// A success is kept.
	if err := g.Do(ctx, "a", fail); err != nil || runs.Load() != 2 {
		t.Fatalf("after success: %v, runs %d", err, runs.Load())
	}
	g.Passed("b")
	if err := g.Do(ctx, "b", fail); err != nil || runs.Load() != 2 {
		t.Fatalf("after Passed: %v, runs %d", err, runs.Load())
	}
}

// A waiter does not inherit the runner's cancellation: it runs the check
// itself.
func TestWaiterOutlivesRunnersCancellation(t *testing.T) {
	var g Group
	started, release := make(chan struct{}), make(chan struct{})
	runnerCtx, cancel := context.WithCancel(context.Background())
	go g.Do(runnerCtx, "k", func(ctx context.Context) error {
		close(started)
		<-release
		return ctx.Err()
	})
	<-started
	result := make(chan error, 1)
	go func() {
		result <- g.Do(context.Background(), "k", func(context.Context) error { return nil })
	}()
	cancel()
	close(release)
	if err := <-result; err != nil {
		t.Fatalf("the waiter got %v, want its own run's nil", err)
	}
}

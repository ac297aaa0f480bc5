package warm

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"evals.si/sandbox"
)

// Closer closes sandboxes in the background: a trial's Close returns at
// once and the kill, unmount and removal happen behind it. At most n
// closes run at a time; a Close beyond that waits for one to finish, so a
// run cannot pile up more dead sandboxes than the machine removes.
type Closer struct {
	sem    chan struct{}
	logger *slog.Logger

	// n counts the closes running; idle is closed when it drops to 0. Not
	// a WaitGroup: a Close may start while Wait waits.
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// NewCloser returns a Closer running at most n closes at once (n ≥ 1).
func NewCloser(n int, logger *slog.Logger) *Closer {
	if logger == nil {
		logger = slog.Default()
	}
	return &Closer{sem: make(chan struct{}, max(n, 1)), logger: logger}
}

// Close starts closing sb. It waits only while n closes already run, or
// until ctx ends; then it closes sb in this goroutine, so sb is never left
// open.
func (c *Closer) Close(ctx context.Context, sb sandbox.Sandbox) {
	c.mu.Lock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		if c.n--; c.n == 0 {
			close(c.idle)
		}
		c.mu.Unlock()
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		closeQuietly(sb, c.logger)
		done()
		return
	}
	go func() {
		defer done()
		defer func() { <-c.sem }()
		closeQuietly(sb, c.logger)
	}()
}

// Wait waits, within ctx, until no close runs.
func (c *Closer) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for sandboxes to close: %w", ctx.Err())
	}
}

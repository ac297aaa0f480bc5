package warm

import (
	"context"
	"errors"
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
	failed closeFailures

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
		closeLogged(sb, c.logger, &c.failed)
		done()
		return
	}
	go func() {
		defer done()
		defer func() { <-c.sem }()
		closeLogged(sb, c.logger, &c.failed)
	}()
}

// Wait waits, within ctx, until no close runs. Its error also names the
// closes that failed so far, which nobody else waited on.
func (c *Closer) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return c.failed.err("trial")
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return c.failed.err("trial")
	case <-ctx.Done():
		return errors.Join(fmt.Errorf("waiting for sandboxes to close: %w", ctx.Err()), c.failed.err("trial"))
	}
}

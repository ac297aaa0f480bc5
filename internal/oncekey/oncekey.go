// Package oncekey runs a check once per key: concurrent callers of a key
// share one run; a success is kept; a failure is not, so the next caller
// (a retry) runs the check again. A caller whose shared run ended with the
// running caller's own cancellation runs it itself while its context is
// live, rather than inheriting another trial's cancellation.
package oncekey

import (
	"context"
	"errors"
	"sync"
)

// Group is the checks of one kind; the zero value is ready to use.
type Group struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done chan struct{}
	err  error
}

// Do runs check for key unless it has passed, or waits for the run under
// way.
func (g *Group) Do(ctx context.Context, key string, check func(context.Context) error) error {
	for {
		g.mu.Lock()
		if g.calls == nil {
			g.calls = map[string]*call{}
		}
		c, ok := g.calls[key]
		if !ok {
			c = &call{done: make(chan struct{})}
			g.calls[key] = c
			g.mu.Unlock()
			c.err = check(ctx)
			if c.err != nil {
				g.mu.Lock()
				delete(g.calls, key)
				g.mu.Unlock()
			}
			close(c.done)
			return c.err
		}
		g.mu.Unlock()
		select {
		case <-c.done:
			if c.err != nil && ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
				continue // the runner's own context ended: run it ourselves
			}
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Passed records key as checked already.
func (g *Group) Passed(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = map[string]*call{}
	}
	c := &call{done: make(chan struct{})}
	close(c.done)
	g.calls[key] = c
}

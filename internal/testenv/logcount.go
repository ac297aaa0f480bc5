package testenv

import (
	"context"
	"log/slog"
	"sync"
)

// LogCounter is a slog handler that counts records by message at every
// level, for tests that check how often something was logged (a setup that
// must run once, a cache that must hit).
type LogCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *LogCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *LogCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[r.Message]++
	return nil
}

func (c *LogCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *LogCounter) WithGroup(string) slog.Handler      { return c }

// Count returns how many records had the message msg.
func (c *LogCounter) Count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

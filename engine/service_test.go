package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// fakeClock advances only when waited on, so the healthcheck's arithmetic
// is tested without waiting.
type fakeClock struct{ now time.Duration }

func (c *fakeClock) Now() time.Time { return time.Unix(0, 0).Add(c.now) }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.now += d
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

// Docker's HEALTHCHECK arithmetic: when checks run, which failures count,
// when the wait ends.
func TestWaitHealthyFollowsDockersSemantics(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		h    healthTiming
		// pass says whether the nth check (from 1) passes.
		pass func(n int) bool
		// exitAfter makes the service exit after that many checks (0: never).
		exitAfter int
		wantAt    []time.Duration // when the checks ran
		wantErr   string          // "" healthy, "unhealthy" or "exited"
	}{
		{
			name: "passes on the third check, the first one interval after the start",
			h:    healthTiming{interval: 30 * s, timeout: 5 * s, startInterval: 5 * s, retries: 3},
			pass: func(n int) bool { return n == 3 }, wantAt: []time.Duration{30 * s, 60 * s, 90 * s},
		},
		{
			name: "retries consecutive failures fail it",
			h:    healthTiming{interval: 10 * s, timeout: 5 * s, startInterval: 5 * s, retries: 3},
			pass: func(int) bool { return false }, wantAt: []time.Duration{10 * s, 20 * s, 30 * s}, wantErr: "unhealthy",
		},
		{
			name: "failures in the start period do not count; checks there come every start_interval",
			h:    healthTiming{interval: 30 * s, timeout: 5 * s, startPeriod: 10 * s, startInterval: 2 * s, retries: 2},
			pass: func(int) bool { return false },
			// 2,4,6,8 in the period; 10 counts (the period has ended), then
			// every interval: 40 is the second counted failure.
			wantAt: []time.Duration{2 * s, 4 * s, 6 * s, 8 * s, 10 * s, 40 * s}, wantErr: "unhealthy",
		},
		{
			name: "a pass in the start period ends the wait",
			h:    healthTiming{interval: 30 * s, timeout: 5 * s, startPeriod: time.Minute, startInterval: 5 * s, retries: 1},
			pass: func(n int) bool { return n == 4 }, wantAt: []time.Duration{5 * s, 10 * s, 15 * s, 20 * s},
		},
		{
			name: "the service exiting ends it, however many retries are left",
			h:    healthTiming{interval: 10 * s, timeout: 5 * s, startPeriod: time.Hour, startInterval: 10 * s, retries: 5},
			pass: func(int) bool { return false }, exitAfter: 2,
			wantAt: []time.Duration{10 * s, 20 * s}, wantErr: "exited",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{}
			var at []time.Duration
			probe := func(_ context.Context, timeout time.Duration) (bool, string, error) {
				if timeout != tc.h.timeout {
					t.Errorf("check bounded by %s, want the timeout %s", timeout, tc.h.timeout)
				}
				at = append(at, clk.now)
				return tc.pass(len(at)), "check output", nil
			}
			exited := func() (int, bool) { return 7, tc.exitAfter > 0 && len(at) >= tc.exitAfter }
			n, err := waitHealthy(context.Background(), tc.h, clk, probe, exited)
			if n != len(at) || !slices.Equal(at, tc.wantAt) {
				t.Errorf("checks ran at %v (returned %d), want %v", at, n, tc.wantAt)
			}
			var he *healthError
			switch tc.wantErr {
			case "":
				if err != nil {
					t.Errorf("err = %v, want healthy", err)
				}
			case "unhealthy":
				if !errors.As(err, &he) || he.exited || he.lastOutput != "check output" {
					t.Errorf("err = %v, want an unhealthy error with the last check's output", err)
				}
			case "exited":
				if !errors.As(err, &he) || !he.exited || he.exitCode != 7 {
					t.Errorf("err = %v, want the service's exit (code 7)", err)
				}
			}
		})
	}
}

// A canceled context ends the wait with its error.
func TestWaitHealthyHonoursTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := waitHealthy(ctx, healthTiming{interval: time.Hour, timeout: time.Second, startInterval: time.Hour, retries: 3}, realClock{},
		func(context.Context, time.Duration) (bool, string, error) { return true, "", nil },
		func() (int, bool) { return 0, false })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

package model

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limiter bounds the concurrent HTTP requests to one provider and adapts
// the bound to how the provider answers, so that a big run neither stalls
// on a fixed low number nor hammers a provider that is shedding load:
//
//   - a 429 or a 5xx halves the window (multiplicative decrease), at most
//     once per in-flight generation, so a burst of failures of requests
//     sent together counts once;
//   - a Retry-After (seconds or an HTTP date) on such an answer holds every
//     new request until then;
//   - each success grows the window by 1/window (additive increase: one
//     more slot per window's worth of successes), up to Max.
//
// It works below the SDKs' own retries, on every attempt, as an
// http.RoundTripper (see Transport). It is safe for concurrent use.
type Limiter struct {
	name     string
	min, max float64

	mu       sync.Mutex
	window   float64
	inflight int
	// gen counts decreases; a failure of a request started before the
	// last decrease does not decrease again.
	gen      int
	until    time.Time
	wake     chan struct{} // closed and replaced when a slot may be free
	limited  int           // 429 and 5xx answers seen
	requests int
}

// LimiterState is a snapshot for live progress.
type LimiterState struct {
	Name     string    `json:"name"`
	Window   int       `json:"window"`
	InFlight int       `json:"in_flight"`
	Limited  int       `json:"limited"`
	Requests int       `json:"requests"`
	Until    time.Time `json:"until,omitzero"`
}

// NewLimiter returns a limiter named name (the provider, for progress)
// starting at initial concurrent requests, adapting between 1 and maxConc.
func NewLimiter(name string, initial, maxConc int) *Limiter {
	hi := max(maxConc, 1)
	initial = min(max(initial, 1), hi)
	return &Limiter{name: name, min: 1, max: float64(hi), window: float64(initial), wake: make(chan struct{})}
}

// State returns the limiter's current state.
func (l *Limiter) State() LimiterState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := LimiterState{Name: l.name, Window: int(l.window), InFlight: l.inflight, Limited: l.limited, Requests: l.requests}
	if time.Now().Before(l.until) {
		s.Until = l.until
	}
	return s
}

// acquire waits for a slot and returns the generation it was taken in.
func (l *Limiter) acquire(ctx context.Context) (int, error) {
	for {
		l.mu.Lock()
		now := time.Now()
		if now.Before(l.until) {
			wait := l.until.Sub(now)
			l.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return 0, ctx.Err()
			}
		}
		if l.inflight < int(l.window) {
			l.inflight++
			l.requests++
			gen := l.gen
			l.mu.Unlock()
			return gen, nil
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// release returns a slot and adapts the window to the answer.
func (l *Limiter) release(gen, status int, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	switch {
	case status == http.StatusTooManyRequests || status >= 500:
		l.limited++
		if gen == l.gen {
			l.window = max(l.window/2, l.min)
			l.gen++
		}
		if retryAfter > 0 {
			if u := time.Now().Add(retryAfter); u.After(l.until) {
				l.until = u
			}
		}
	case status > 0 && status < 400:
		l.window = min(l.window+1/l.window, l.max)
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

// Transport wraps next (nil: http.DefaultTransport) so every request goes
// through the limiter.
func (l *Limiter) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return limitedTransport{l: l, next: next}
}

type limitedTransport struct {
	l    *Limiter
	next http.RoundTripper
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	gen, err := t.l.acquire(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		// A transport error says nothing about the provider's load.
		t.l.release(gen, 0, 0)
		return nil, err
	}
	t.l.release(gen, resp.StatusCode, RetryAfter(resp.Header, time.Now()))
	return resp, nil
}

// RetryAfter reads a Retry-After header (delay-seconds or an HTTP date)
// relative to now; 0 when absent or unreadable. Delays are capped at ten
// minutes: a provider asking for more is better reported than waited on.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), 10*time.Minute)
}

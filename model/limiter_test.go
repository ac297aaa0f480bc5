package model

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second},
		{"-4", 0},
		{"soon", 0},
		{"86400", 10 * time.Minute},
	} {
		h := http.Header{}
		if tc.v != "" {
			h.Set("Retry-After", tc.v)
		}
		if got := RetryAfter(h, now); got != tc.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// A provider that answers 429 above a concurrency it can serve: the
// limiter's window comes down to it, every request eventually succeeds,
// and the Retry-After pause is honoured.
func TestLimiterAdaptsToRateLimits(t *testing.T) {
	const capacity = 3
	var inflight, peakAccepted, rejected atomic.Int64
	var mu sync.Mutex
	var lastReject, firstAfterReject time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		if n > capacity {
			rejected.Add(1)
			mu.Lock()
			lastReject = time.Now()
			mu.Unlock()
			w.Header().Set("Retry-After", "0.05")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		mu.Lock()
		if !lastReject.IsZero() && firstAfterReject.IsZero() {
			firstAfterReject = time.Now()
		}
		mu.Unlock()
		for {
			p := peakAccepted.Load()
			if n <= p || peakAccepted.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	l := NewLimiter("test", 16, 32)
	client := &http.Client{Transport: l.Transport(nil)}
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				// Retry like the SDKs do, through the limiter.
				for {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						ok.Add(1)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	st := l.State()
	if ok.Load() != 320 {
		t.Fatalf("%d requests succeeded, want 320", ok.Load())
	}
	if rejected.Load() == 0 || st.Limited != int(rejected.Load()) {
		t.Errorf("limiter saw %d limited answers, server sent %d", st.Limited, rejected.Load())
	}
	// Rejections stop being the common case: far fewer than successes.
	if rejected.Load() > 160 {
		t.Errorf("%d rejections for 320 successes: the limiter did not back off", rejected.Load())
	}
	if st.Window > 2*capacity+2 {
		t.Errorf("window %d after a run against a provider serving %d at once", st.Window, capacity)
	}
	if st.InFlight != 0 {
		t.Errorf("%d requests still counted in flight", st.InFlight)
	}
}

func TestLimiterGrowsOnSuccessAndHoldsForRetryAfter(t *testing.T) {
	l := NewLimiter("p", 1, 4)
	ctx := context.Background()
	for range 20 {
		gen, err := l.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.release(gen, http.StatusOK, 0)
	}
	if w := l.State().Window; w != 4 {
		t.Fatalf("window after 20 successes = %d, want the max 4", w)
	}
	// Four requests in flight fail together: one halving, not four.
	var gens []int
	for range 4 {
		g, _ := l.acquire(ctx)
		gens = append(gens, g)
	}
	for _, g := range gens {
		l.release(g, http.StatusServiceUnavailable, 0)
	}
	if w := l.State().Window; w != 2 {
		t.Errorf("window after a burst of 503s = %d, want 2", w)
	}
	g, _ := l.acquire(ctx)
	l.release(g, http.StatusTooManyRequests, time.Hour)
	if st := l.State(); st.Until.IsZero() || st.Window != 1 {
		t.Errorf("after a 429 with Retry-After: %+v", st)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.acquire(cctx); err == nil {
		t.Error("a request started during the Retry-After pause")
	}
}

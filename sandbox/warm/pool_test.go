package warm

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/sandbox"
)

// box is a sandbox that only records whether it was closed: the pool's
// logic (hand-outs, refills, budgets, drains) is what is under test; the
// environment package tests the pools over real bwrap sandboxes.
type box struct {
	id     int
	closed atomic.Bool
}

func (b *box) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, nil
}
func (b *box) ReadFile(context.Context, string) ([]byte, error)             { return nil, nil }
func (b *box) WriteFile(context.Context, string, []byte, fs.FileMode) error { return nil }
func (b *box) StartService(context.Context, sandbox.ExecRequest) (sandbox.Service, error) {
	return nil, errors.ErrUnsupported
}
func (b *box) Report() sandbox.Report { return sandbox.Report{} }
func (b *box) Close(context.Context) error {
	b.closed.Store(true)
	return nil
}

type maker struct {
	mu    sync.Mutex
	made  []*box
	fail  atomic.Bool
	delay time.Duration
}

func (m *maker) make(ctx context.Context) (sandbox.Sandbox, error) {
	time.Sleep(m.delay)
	if m.fail.Load() {
		return nil, errors.New("cannot make")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &box{id: len(m.made)}
	m.made = append(m.made, b)
	return b, nil
}

func (m *maker) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.made)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func enough() (int, error) { return 1 << 20, nil }

func TestTakeHandsOutEachSandboxOnce(t *testing.T) {
	p := New(Options{PerKey: 2, MemAvailable: enough})
	defer p.Close(context.Background())
	m := &maker{}
	seen := map[sandbox.Sandbox]bool{}
	for i := range 10 {
		sb, err := p.Take(context.Background(), "k", m.make)
		if err != nil {
			t.Fatal(err)
		}
		if seen[sb] {
			t.Fatalf("take %d handed out sandbox %d a second time", i, sb.(*box).id)
		}
		seen[sb] = true
		if i >= 1 {
			// From the second take on, the pool refills to two.
			waitFor(t, "the refill", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.pools["k"].ready) == 2 })
		}
	}
	st := p.Stats()
	if st.Misses != 2 || st.Hits != 8 {
		t.Errorf("stats = %+v, want 2 misses (the first two takes) and 8 hits", st)
	}
}

func TestConcurrentTakesNeverShare(t *testing.T) {
	p := New(Options{PerKey: 4, MaxReady: 4, MemAvailable: enough})
	defer p.Close(context.Background())
	m := &maker{}
	var mu sync.Mutex
	seen := map[sandbox.Sandbox]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				sb, err := p.Take(context.Background(), "k", m.make)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[sb]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for sb, n := range seen {
		if n != 1 {
			t.Errorf("sandbox %d handed out %d times", sb.(*box).id, n)
		}
	}
	if len(seen) != 200 {
		t.Errorf("%d distinct sandboxes for 200 takes", len(seen))
	}
}

func TestBudgets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		o         Options
		keys      []string
		wantReady int
	}{
		{"per key", Options{PerKey: 3, MaxReady: 10}, []string{"a"}, 3},
		{"across keys", Options{PerKey: 3, MaxReady: 4}, []string{"a", "b"}, 4},
		{"low memory", Options{PerKey: 3, MaxReady: 10, MinAvailableMB: 512, MemAvailable: func() (int, error) { return 100, nil }}, []string{"a"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.MemAvailable == nil {
				tc.o.MemAvailable = enough
			}
			p := New(tc.o)
			defer p.Close(context.Background())
			m := &maker{}
			for _, k := range tc.keys {
				for range 2 {
					if _, err := p.Take(context.Background(), k, m.make); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
			p.mu.Lock()
			got := p.ready
			p.mu.Unlock()
			if got != tc.wantReady {
				t.Errorf("ready = %d, want %d", got, tc.wantReady)
			}
		})
	}
}

func TestKeyTakenOnceMakesNoSpares(t *testing.T) {
	p := New(Options{MemAvailable: enough})
	defer p.Close(context.Background())
	m := &maker{}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := p.Take(context.Background(), k, m.make); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := m.count(); n != 3 {
		t.Errorf("made %d sandboxes for three keys taken once each, want 3 (no spares)", n)
	}
}

func TestFailedRefillStops(t *testing.T) {
	p := New(Options{MemAvailable: enough})
	defer p.Close(context.Background())
	m := &maker{}
	for range 2 {
		if _, err := p.Take(context.Background(), "k", m.make); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the refill", func() bool { return m.count() == 4 })
	m.fail.Store(true)
	p.Drain(nil)
	if _, err := p.Take(context.Background(), "k", m.make); err == nil {
		t.Fatal("a take whose make fails succeeded")
	}
	// The take re-created the pool and a make failed on the spot: no
	// background retries follow.
	time.Sleep(50 * time.Millisecond)
	if n := m.count(); n != 4 {
		t.Errorf("made %d, want 4", n)
	}
}

func TestDrainAndClose(t *testing.T) {
	p := New(Options{PerKey: 2, Idle: 40 * time.Millisecond, MemAvailable: enough})
	m := &maker{delay: 5 * time.Millisecond}
	for range 2 {
		if _, err := p.Take(context.Background(), "k", m.make); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the refill", func() bool { return m.count() == 4 })
	// Idle: drained, and the spares closed.
	waitFor(t, "the idle drain", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.made[2].closed.Load() && m.made[3].closed.Load()
	})
	for range 2 {
		if _, err := p.Take(context.Background(), "k", m.make); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	for _, b := range m.made[6:] {
		if !b.closed.Load() {
			t.Errorf("spare %d not closed by Close", b.id)
		}
	}
	for _, b := range m.made[:2] {
		if b.closed.Load() {
			t.Errorf("sandbox %d, handed out, was closed by the pool", b.id)
		}
	}
	m.mu.Unlock()
	if _, err := p.Take(context.Background(), "k", m.make); !errors.Is(err, ErrClosed) {
		t.Errorf("take after Close: %v, want ErrClosed", err)
	}
}

func TestCloserBoundsAndWaits(t *testing.T) {
	c := NewCloser(2, nil)
	var running, peak atomic.Int32
	release := make(chan struct{})
	var boxes []*slowBox
	for range 5 {
		b := &slowBox{running: &running, peak: &peak, release: release}
		boxes = append(boxes, b)
		go c.Close(context.Background(), b)
	}
	time.Sleep(30 * time.Millisecond)
	if n := running.Load(); n != 2 {
		t.Errorf("%d closes running, want the bound of 2", n)
	}
	close(release)
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Wait covers closes started before it; the last Close calls may
	// still have been blocked on the bound when Wait began.
	waitFor(t, "every close", func() bool {
		for _, b := range boxes {
			if !b.closed.Load() {
				return false
			}
		}
		return true
	})
	if p := peak.Load(); p > 2 {
		t.Errorf("peak concurrent closes %d, want ≤ 2", p)
	}
}

type slowBox struct {
	box
	running, peak *atomic.Int32
	release       chan struct{}
}

func (b *slowBox) Close(context.Context) error {
	n := b.running.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-b.release
	b.running.Add(-1)
	b.closed.Store(true)
	return nil
}

// failBox fails to close, as a sandbox whose unmount or removal failed.
type failBox struct{ box }

func (b *failBox) Close(context.Context) error {
	b.closed.Store(true)
	return errors.New("unmounting: device busy")
}

// A background close nobody waits on must not fail only into a log: the
// pools' Close and the Closer's Wait report it.
func TestFailedClosesAreReported(t *testing.T) {
	t.Run("pools", func(t *testing.T) {
		p := New(Options{PerKey: 2, MemAvailable: enough})
		var made atomic.Int32
		mk := func(context.Context) (sandbox.Sandbox, error) {
			made.Add(1)
			return &failBox{}, nil
		}
		for range 2 {
			if _, err := p.Take(context.Background(), "k", mk); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the refill", func() bool { return p.Ready("k") == 2 })
		err := p.Close(context.Background())
		if err == nil || !strings.Contains(err.Error(), "2 warm sandbox(es) failed to close") || !strings.Contains(err.Error(), "device busy") {
			t.Errorf("Close: %v, want the 2 failed closes of the spares", err)
		}
	})
	t.Run("closer", func(t *testing.T) {
		c := NewCloser(2, nil)
		c.Close(context.Background(), &box{})
		c.Close(context.Background(), &failBox{})
		err := c.Wait(context.Background())
		if err == nil || !strings.Contains(err.Error(), "1 trial sandbox(es) failed to close") {
			t.Errorf("Wait: %v, want the one failed close", err)
		}
	})
}

// A refill asked for by a take whose pool was drained meanwhile makes
// nothing: it would only be closed unused.
func TestNoRefillAfterDrain(t *testing.T) {
	p := New(Options{PerKey: 2, MemAvailable: enough})
	defer p.Close(context.Background())
	m := &maker{}
	if _, err := p.Take(context.Background(), "k", m.make); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	pl := p.pools["k"]
	pl.takes++ // as if a second take were under way
	p.mu.Unlock()
	p.Drain(nil)
	p.refill(pl)
	// refill counts what it starts making before it returns.
	p.mu.Lock()
	making := pl.making
	p.mu.Unlock()
	if making != 0 {
		t.Errorf("a drained pool started %d refills, want none", making)
	}
}

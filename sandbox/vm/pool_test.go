package vm

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeMachine stands for a booted VM: the pool's rules are about which
// machine goes where, not about booting.
type fakeMachine struct {
	done   chan struct{}
	once   sync.Once
	killed atomic.Bool
}

func newFakeMachine() *fakeMachine { return &fakeMachine{done: make(chan struct{})} }

func (m *fakeMachine) Control() io.ReadWriteCloser { return nil }
func (m *fakeMachine) Done() <-chan struct{}       { return m.done }
func (m *fakeMachine) Err() error                  { return nil }
func (m *fakeMachine) Kill() error {
	m.killed.Store(true)
	m.once.Do(func() { close(m.done) })
	return nil
}

func TestWarmPool(t *testing.T) {
	var mu sync.Mutex
	var made []*fakeMachine
	start := func(context.Context) (*instance, error) {
		m := newFakeMachine()
		mu.Lock()
		made = append(made, m)
		mu.Unlock()
		return &instance{m: m, dir: t.TempDir()}, nil
	}
	r := New(Options{})
	p := r.pool(poolKey{root: "r"}, 2, start)
	waitReady := func(n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for len(p.ready) < n {
			if time.Now().After(deadline) {
				t.Fatalf("the pool holds %d ready machines, want %d", len(p.ready), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The first take boots at once (nothing is ready) and fills the pool.
	first, err := p.take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	waitReady(2)

	// Takes hand out ready machines, each once, and the pool refills.
	seen := map[Machine]bool{first.m: true}
	for range 6 {
		inst, err := p.take(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if seen[inst.m] {
			t.Fatal("a machine was handed out twice")
		}
		seen[inst.m] = true
		waitReady(2)
	}

	// A ready machine that died is killed, never handed out.
	dead := <-p.ready
	dead.m.Kill()
	p.ready <- dead
	inst, err := p.take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if inst.m == dead.m {
		t.Fatal("a dead machine was handed out")
	}

	// Draining kills what is ready, and nothing is booted after.
	waitReady(2)
	p.drain()
	mu.Lock()
	n := len(made)
	mu.Unlock()
	for _, m := range made {
		if !seen[m] && m != inst.m && !m.killed.Load() {
			t.Error("a ready machine outlived the pool's drain")
		}
	}
	p.fill()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(made) != n {
		t.Errorf("a drained pool booted %d more machines", len(made)-n)
	}
}

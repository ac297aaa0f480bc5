package vm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"evals.si/sandbox"
)

// A warm pool keeps warm_pool machines booted (or restored) and serving
// per distinct start (root disk, snapshot, size), so a sandbox's create is
// a take. A machine is handed out once and never returns: its sandbox
// kills it. The pool refills in the background; pools not taken from for
// poolIdle are drained, and at most maxPools live at once.
const (
	poolIdle = 5 * time.Minute
	maxPools = 4
)

type poolKey struct {
	root, state string
	vcpus, mem  int
}

type warmPool struct {
	key   poolKey
	size  int
	ready chan *instance
	// start boots one machine for the pool.
	start func(ctx context.Context) (*instance, error)

	mu       sync.Mutex
	booting  int
	lastTake time.Time
	ctx      context.Context
	stop     context.CancelFunc
}

// take returns a serving machine for key: from its warm pool when one is
// ready, else booted now (and the pool, when the settings ask for one,
// refills behind it).
func (r *Rung) take(ctx context.Context, key poolKey, bf BootFiles, set sandbox.VMSettings, root Disk, state, cache string) (*instance, error) {
	machines := filepath.Join(cache, "machines")
	if err := os.MkdirAll(machines, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", machines, err)
	}
	start := func(ctx context.Context) (*instance, error) {
		dir, err := os.MkdirTemp(machines, "m-")
		if err != nil {
			return nil, fmt.Errorf("creating a machine directory: %w", err)
		}
		inst, err := r.boot(ctx, bf, set, root, dir, "", state)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return inst, nil
	}
	if set.WarmPool <= 0 {
		return start(ctx)
	}
	return r.pool(key, set.WarmPool, start).take(ctx)
}

// take hands out a ready machine, or boots one now when none is; either
// way the pool refills behind it. A machine that died while it waited is
// killed, never handed out.
func (p *warmPool) take(ctx context.Context) (*instance, error) {
	for {
		select {
		case inst := <-p.ready:
			p.fill()
			select {
			case <-inst.m.Done():
				inst.kill()
				continue
			default:
			}
			return inst, nil
		default:
		}
		p.fill()
		return p.start(ctx)
	}
}

func (r *Rung) pool(key poolKey, size int, start func(context.Context) (*instance, error)) *warmPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for k, p := range r.pools {
		if p.idleSince(now) > poolIdle {
			p.drain()
			delete(r.pools, k)
		}
	}
	p := r.pools[key.String()]
	if p == nil {
		if len(r.pools) >= maxPools {
			var oldest *warmPool
			for _, q := range r.pools {
				if oldest == nil || q.lastTake.Before(oldest.lastTake) {
					oldest = q
				}
			}
			oldest.drain()
			delete(r.pools, oldest.key.String())
		}
		ctx, cancel := context.WithCancel(context.Background())
		p = &warmPool{key: key, size: size, ready: make(chan *instance, size), start: start, ctx: ctx, stop: cancel}
		r.pools[key.String()] = p
	}
	p.mu.Lock()
	p.lastTake = now
	p.mu.Unlock()
	return p
}

func (k poolKey) String() string { return fmt.Sprintf("%s|%s|%d|%d", k.root, k.state, k.vcpus, k.mem) }

func (p *warmPool) idleSince(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return now.Sub(p.lastTake)
}

// fill boots machines until ready and booting make the pool's size.
func (p *warmPool) fill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.ctx.Err() == nil && len(p.ready)+p.booting < p.size {
		p.booting++
		go func() {
			inst, err := p.start(p.ctx)
			p.mu.Lock()
			p.booting--
			stopped := p.ctx.Err() != nil
			p.mu.Unlock()
			if err != nil {
				if !stopped {
					slog.Warn("warm pool: booting a machine failed", "err", err)
				}
				return
			}
			if stopped {
				inst.kill()
				return
			}
			select {
			case p.ready <- inst:
			default:
				inst.kill()
			}
		}()
	}
}

// drain stops the pool: ready machines are killed, booting ones when they
// come up.
func (p *warmPool) drain() {
	p.stop()
	for {
		select {
		case inst := <-p.ready:
			inst.kill()
		default:
			return
		}
	}
}

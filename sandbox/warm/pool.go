// Package warm keeps sandboxes ready ahead of the trials that take them, and
// closes the trials' sandboxes off their critical path.
//
// A pool is per key: the whole configuration a sandbox is made from (its
// setup snapshot, image, policy, limits, user, environment, run), so a take
// hands out exactly the sandbox the trial would have made itself. A sandbox
// is handed out once and never returns to a pool; its trial closes it.
// Pools refill in the background within a count budget (ready sandboxes
// across pools) and a memory floor (no refill while the host's available
// memory is below it), and a pool nobody took from for a while is drained.
package warm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"evals.si/sandbox"
)

// Options bound the pools; zero values pick the defaults.
type Options struct {
	// PerKey is how many sandboxes a key keeps ready (default 2).
	PerKey int
	// MaxReady bounds ready sandboxes across keys (default 8).
	MaxReady int
	// MinAvailableMB stops refilling while the host's MemAvailable is
	// below it (default 1024).
	MinAvailableMB int
	// Idle drains a pool nobody took from for this long (default 30 s).
	Idle time.Duration
	// MemAvailable reads the host's available memory in MB (default:
	// /proc/meminfo); tests give their own.
	MemAvailable func() (int, error)
	Logger       *slog.Logger
}

// Maker makes one sandbox for a key; it must not depend on the context of
// the trial that first asked (refills run after that trial has gone).
type Maker func(ctx context.Context) (sandbox.Sandbox, error)

// Pools are the warm pools of one engine.
type Pools struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	pools  map[string]*pool
	ready  int // across pools
	closed bool
	stats  Stats
	// failed records the closes that failed, for Close to report.
	failed closeFailures
}

// Stats count takes.
type Stats struct {
	// Hits are takes a ready sandbox served; Misses made one on the spot.
	Hits, Misses int
}

type pool struct {
	key      string
	make     Maker
	ready    []sandbox.Sandbox
	making   int
	takes    int
	lastTake time.Time
	// failed is set after a refill failed: the pool stops refilling until
	// a take succeeds on the spot, so a broken configuration is not
	// retried in the background forever.
	failed bool
}

// New returns empty pools.
func New(o Options) *Pools {
	if o.PerKey == 0 {
		o.PerKey = 2
	}
	if o.MaxReady == 0 {
		o.MaxReady = 8
	}
	if o.MinAvailableMB == 0 {
		o.MinAvailableMB = 1024
	}
	if o.Idle == 0 {
		o.Idle = 30 * time.Second
	}
	if o.MemAvailable == nil {
		o.MemAvailable = memAvailableMB
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pools{o: o, ctx: ctx, cancel: cancel, pools: map[string]*pool{}}
	p.wg.Add(1)
	go p.drainIdle()
	return p
}

// ErrClosed is returned by Take once the pools are closed.
var ErrClosed = errors.New("warm pools closed")

// Take returns a sandbox for key: a ready one when its pool has one, else
// one make makes now. From a key's second take on the pool refills behind
// it, so the next take of the key finds one ready.
func (p *Pools) Take(ctx context.Context, key string, make Maker) (sandbox.Sandbox, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	pl := p.pools[key]
	if pl == nil {
		pl = &pool{key: key, make: make}
		p.pools[key] = pl
	}
	pl.lastTake = time.Now()
	pl.takes++
	var sb sandbox.Sandbox
	if n := len(pl.ready); n > 0 {
		sb = pl.ready[0]
		pl.ready = append(pl.ready[:0], pl.ready[1:]...)
		p.ready--
		p.stats.Hits++
	} else {
		p.stats.Misses++
	}
	p.mu.Unlock()
	if sb == nil {
		var err error
		if sb, err = make(ctx); err != nil {
			return nil, err
		}
		p.mu.Lock()
		pl.failed = false
		p.mu.Unlock()
	}
	p.refill(pl)
	return sb, nil
}

// refill starts making sandboxes for pl until it holds PerKey (counting
// those being made), within the budget. A key taken once is not refilled:
// a dataset whose records each have a setup of their own takes each key
// once, and spares made for them would only be closed unused.
func (p *Pools) refill(pl *pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl.takes < 2 {
		return
	}
	// A pool drained since the take that asked is no longer in p.pools:
	// what it made would only be closed unused.
	for !p.closed && !pl.failed && p.pools[pl.key] == pl && len(pl.ready)+pl.making < p.o.PerKey && p.ready+p.makingAll() < p.o.MaxReady {
		if mb, err := p.o.MemAvailable(); err == nil && mb < p.o.MinAvailableMB {
			p.o.Logger.Debug("warm pool not refilled: low memory", "available_mb", mb, "floor_mb", p.o.MinAvailableMB)
			return
		}
		pl.making++
		p.wg.Add(1)
		go p.makeOne(pl)
	}
}

func (p *Pools) makingAll() int {
	n := 0
	for _, pl := range p.pools {
		n += pl.making
	}
	return n
}

func (p *Pools) makeOne(pl *pool) {
	defer p.wg.Done()
	sb, err := pl.make(p.ctx)
	p.mu.Lock()
	pl.making--
	if err != nil {
		pl.failed = true
		p.mu.Unlock()
		if p.ctx.Err() == nil {
			p.o.Logger.Warn("warm pool: making a sandbox ahead failed; trials make their own", "err", err)
		}
		return
	}
	if p.closed || p.pools[pl.key] != pl {
		// Drained meanwhile: nobody will take it.
		p.mu.Unlock()
		closeLogged(sb, p.o.Logger, &p.failed)
		return
	}
	pl.ready = append(pl.ready, sb)
	p.ready++
	p.mu.Unlock()
}

// Stats are the takes so far.
func (p *Pools) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Drain closes the ready sandboxes of the pools whose key keep says, and
// forgets those pools (sandboxes being made for them are closed when made).
func (p *Pools) Drain(keep func(key string) bool) {
	var out []sandbox.Sandbox
	p.mu.Lock()
	for k, pl := range p.pools {
		if keep != nil && keep(k) {
			continue
		}
		out = append(out, pl.ready...)
		p.ready -= len(pl.ready)
		pl.ready = nil
		delete(p.pools, k)
	}
	p.mu.Unlock()
	for _, sb := range out {
		closeLogged(sb, p.o.Logger, &p.failed)
	}
}

// drainIdle drains pools nobody took from for Idle.
func (p *Pools) drainIdle() {
	defer p.wg.Done()
	t := time.NewTicker(max(p.o.Idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			idle := map[string]bool{}
			for k, pl := range p.pools {
				if now.Sub(pl.lastTake) >= p.o.Idle {
					idle[k] = true
				}
			}
			p.mu.Unlock()
			if len(idle) > 0 {
				p.Drain(func(k string) bool { return !idle[k] })
			}
		}
	}
}

// Close drains every pool and waits, within ctx, for the sandboxes being
// made (each is closed when made). Takes after Close fail. Its error names
// the warm sandboxes that failed to close, over the pools' whole life: what
// they hold (mounts, processes, a container) is left for the next engine's
// sweep.
func (p *Pools) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.Drain(nil)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return p.failed.err("warm")
	case <-ctx.Done():
		return errors.Join(fmt.Errorf("closing warm pools: %w", ctx.Err()), p.failed.err("warm"))
	}
}

func closeLogged(sb sandbox.Sandbox, logger *slog.Logger, failed *closeFailures) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := sb.Close(ctx); err != nil {
		logger.Warn("closing a sandbox in the background", "err", err)
		failed.add(err)
	}
}

// closeFailures counts background closes that failed and keeps the first
// few errors: a close nobody waits on must still reach the engine's Close
// rather than only a log line.
type closeFailures struct {
	mu    sync.Mutex
	n     int
	first []error
}

const keptCloseErrors = 3

func (f *closeFailures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.first) < keptCloseErrors {
		f.first = append(f.first, err)
	}
}

// err is nil when no close failed.
func (f *closeFailures) err(what string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return nil
	}
	return fmt.Errorf("%d %s sandbox(es) failed to close (their leftovers are removed by the next engine's sweep): %w", f.n, what, errors.Join(f.first...))
}

// closeTimeout bounds one background close.
const closeTimeout = 2 * time.Minute

// memAvailableMB reads MemAvailable from /proc/meminfo.
func memAvailableMB() (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				return 0, fmt.Errorf("reading MemAvailable: %w", err)
			}
			return kb >> 10, nil
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}

// Ready is how many sandboxes key has ready.
func (p *Pools) Ready(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.pools[key]; pl != nil {
		return len(pl.ready)
	}
	return 0
}

// ReadyAll is how many sandboxes are ready across keys.
func (p *Pools) ReadyAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/warm"
)

// warmPerKey is the pool's size, as the engine's default.
const warmPerKey = 2

// refillTimeout bounds the untimed wait for the pool to refill.
const refillTimeout = time.Minute

// warmBench is the bwrap rung's trial sandboxes taken from a warm pool and
// closed through a background closer, as the engine does it
// (environment.Manager's trialSandbox).
type warmBench struct {
	pools  *warm.Pools
	closer *warm.Closer
	maker  warm.Maker
	// made counts sandboxes the maker finished; takes counts Take calls.
	// Every take consumes one made sandbox, so made-takes is what the
	// pool holds ready once no make is in flight.
	made  atomic.Int64
	takes int64
	// hits and timed count the timed takes and those a ready sandbox
	// served.
	hits, timed int
}

const warmKeyName = "bench"

// newWarmBench makes pools whose maker creates sandboxes of cfg, each with
// a state directory of its own under dir, and primes them: a key is
// refilled from its second take on, so two untimed takes start the refill.
func newWarmBench(ctx context.Context, r sandbox.Rung, cfg sandbox.Config, dir string) (*warmBench, error) {
	w := &warmBench{
		pools:  warm.New(warm.Options{PerKey: warmPerKey}),
		closer: warm.NewCloser(4, nil),
	}
	var seq atomic.Int64
	w.maker = func(ctx context.Context) (sandbox.Sandbox, error) {
		c := cfg
		// Not created here: the rung creates it and so removes it on Close.
		c.StateDir = filepath.Join(dir, "w-"+strconv.FormatInt(seq.Add(1), 10))
		sb, err := r.Create(ctx, c)
		if err == nil {
			w.made.Add(1)
		}
		return sb, err
	}
	for range 2 {
		sb, _, err := w.take(ctx)
		if err != nil {
			w.close(ctx)
			return nil, fmt.Errorf("priming the warm pool: %w", err)
		}
		w.closer.Close(ctx, sb)
	}
	if err := w.settle(ctx); err != nil {
		w.close(ctx)
		return nil, err
	}
	return w, nil
}

func (w *warmBench) take(ctx context.Context) (sandbox.Sandbox, bool, error) {
	before := w.pools.Stats().Hits
	w.takes++
	sb, err := w.pools.Take(ctx, warmKeyName, w.maker)
	if err != nil {
		return nil, false, fmt.Errorf("taking from the warm pool: %w", err)
	}
	return sb, w.pools.Stats().Hits > before, nil
}

// cycle is the timed part: take, exec `true`, close through the closer.
func (w *warmBench) cycle(ctx context.Context, round int) error {
	sb, hit, err := w.take(ctx)
	if err != nil {
		return err
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
	w.closer.Close(ctx, sb)
	if round > 0 {
		w.timed++
		if hit {
			w.hits++
		}
	}
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}

// settle waits, untimed, until the pool is full again and the closer has
// removed what it was given, so no background create or removal runs
// while the next case is timed.
func (w *warmBench) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, refillTimeout)
	defer cancel()
	for w.made.Load()-w.takes < warmPerKey {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the warm pool did not refill within %s: %d of %d ready (a failed make is logged above)", refillTimeout, w.made.Load()-w.takes, warmPerKey)
		case <-time.After(time.Millisecond):
		}
	}
	return w.closer.Wait(ctx)
}

// close drains the pools and waits for every close.
func (w *warmBench) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	perr := w.pools.Close(ctx)
	if err := w.closer.Wait(ctx); err != nil {
		return err
	}
	return perr
}

// warmCase is case (4): take + exec `true` + close, the refill and the
// close settled untimed after each. The caller closes w and reports its
// hits.
func warmCase(ctx context.Context, r sandbox.Rung, name string, layer sandbox.Layer, dir string) (benchCase, *warmBench) {
	w, err := newWarmBench(ctx, r, sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer}}, dir)
	if err != nil {
		return benchCase{name: name, skipped: err.Error()}, nil
	}
	return benchCase{
		name:  name,
		fn:    func(i int) error { return w.cycle(ctx, i) },
		after: func(int) error { return w.settle(ctx) },
	}, w
}

// commandCase is case (5): one sandbox, made once outside the timing; each
// iteration is one Exec of `bash -c true`. close closes the sandbox.
func commandCase(ctx context.Context, r sandbox.Rung, name string, layer sandbox.Layer, dir string) (benchCase, func()) {
	sb, err := r.Create(ctx, sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer}, StateDir: dir})
	if err != nil {
		return benchCase{name: name, skipped: fmt.Sprintf("creating the sandbox: %v", err)}, func() {}
	}
	run := func(int) error {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"bash", "-c", "true"}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("bash -c true exited %d: %s", res.ExitCode, res.Stderr)
		}
		return nil
	}
	return benchCase{name: name, fn: run}, func() { sb.Close(context.WithoutCancel(ctx)) }
}

// bashCase is case (2), the floor of a command: fork and exec of `bash -c
// true` from this process.
func bashCase(ctx context.Context, name string) benchCase {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return benchCase{name: name, skipped: err.Error()}
	}
	return benchCase{name: name, fn: func(int) error {
		if err := exec.CommandContext(ctx, bash, "-c", "true").Run(); err != nil {
			return fmt.Errorf("bash -c true: %w", err)
		}
		return nil
	}}
}

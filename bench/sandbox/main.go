// Command sandbox measures, in one run, what a trial's sandbox and a
// command in it cost on each working rung, beside the floors the issue
// sets targets against. The cases that are compared run interleaved, one
// iteration of each in turn, so load drifting on a shared machine hits
// them alike:
//
//   - bare `bwrap --unshare-all … true`, and a bare fork/exec of `bash -c
//     true` from this process: the floors of a sandbox and of a command;
//   - create + exec `true` + close of a bwrap sandbox restored from a setup
//     snapshot, cold (target: none now, informational);
//   - the same from a warm pool (package sandbox/warm, two per key, as the
//     engine keeps them): take + exec `true` + close, the close handed to a
//     background closer as the engine does it. The refill and the removal
//     are waited for, untimed, after each take, so every timed take is a
//     hit ("warm hits n/n") and no background work runs while another case
//     is timed (target: ≤ 1.5× bare bwrap);
//   - one Exec of `bash -c true` in a bwrap sandbox made once, outside the
//     timing (target: ≤ 2× the bare fork/exec);
//   - the landlock and docker rungs from a setup snapshot;
//   - `docker run --rm` of the docker rung's snapshot image through the
//     Engine API: create, start, wait, remove (target: ≥ 30× the warm
//     bwrap take);
//   - the bwrap rung over a small (10 MB) and a large (1 GB) image root
//     (target: large within 2× of small). The trees are built once under
//     the cache directory;
//   - the qemu microVM rung on the small root, in the same run: a cold boot,
//     a restore from the setup snapshot and a take from its warm pool
//     (with -vm-kernel and -vm-guest, or the rung's defaults: the cached
//     kernel bundle and evalsi-guest next to this binary).
//
// It prints the machine (date, CPUs, load average), medians, means,
// minimums and maximums, the ratios with their targets, the share of CPU
// time the hypervisor stole over the run (/proc/stat), and a note when the
// load average exceeds the CPUs.
//
// Build it with CGO_ENABLED=0 like the engine: the rungs re-execute this
// binary as their helpers.
//
//	CGO_ENABLED=0 go build -o /tmp/bs/bench-sandbox ./bench/sandbox
//	/tmp/bs/bench-sandbox [-n 20] [-docker-n 10] [-large-mb 1024] \
//	    [-vm-n 5 -vm-guest /tmp/evalsi-guest]
package main

import (
	"context"
	"evals.si/bench/internal/machine"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/docker/api/types/container"

	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/landlock"
	"evals.si/sandbox/reexec"
)

type options struct {
	n, dockerN, vmN    int
	vmKernel, vmGuest  string
	smallMB, largeMB   int
	cacheDir, stateDir string
}

func main() {
	reexec.Init()
	var o options
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	flag.IntVar(&o.n, "n", 20, "timed iterations per bwrap/landlock case (after one warm-up)")
	flag.IntVar(&o.dockerN, "docker-n", 10, "timed iterations per docker case (after one warm-up)")
	flag.IntVar(&o.vmN, "vm-n", 5, "timed iterations per qemu case (after one warm-up); 0 skips them")
	flag.StringVar(&o.vmKernel, "vm-kernel", "", "guest kernel of the qemu cases (default: the rung's, scripts/build-vm-kernel.sh's bundle)")
	flag.StringVar(&o.vmGuest, "vm-guest", "", "evalsi-guest of the qemu cases (default: next to this binary; CGO_ENABLED=0 go build -o DIR/evalsi-guest ./cmd/evalsi-guest)")
	flag.IntVar(&o.smallMB, "small-mb", 10, "size of the small image root, in MB")
	flag.IntVar(&o.largeMB, "large-mb", 1024, "size of the large image root, in MB")
	flag.StringVar(&o.cacheDir, "cache", filepath.Join(cache, "evalsi", "bench-sandbox"), "where the image-root trees are built once and kept")
	flag.StringVar(&o.stateDir, "state", "", "where sandboxes keep their state (default: a temporary directory, removed)")
	flag.Parse()
	if o.n < 1 || o.dockerN < 1 || o.smallMB < 1 || o.largeMB < 1 || o.vmN < 0 {
		fmt.Fprintln(os.Stderr, "bench/sandbox: -n, -docker-n, -small-mb and -large-mb must be positive, -vm-n not negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/sandbox:", err)
		os.Exit(1)
	}
}

// result is one measured case; skipped says why it was not measured.
type result struct {
	name    string
	samples []time.Duration
	skipped string
}

func (r result) median() time.Duration {
	if len(r.samples) == 0 {
		return 0
	}
	s := slices.Clone(r.samples)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r result) mean() time.Duration {
	var sum time.Duration
	for _, d := range r.samples {
		sum += d
	}
	if len(r.samples) == 0 {
		return 0
	}
	return sum / time.Duration(len(r.samples))
}

// benchCase is one thing to time; fn gets the iteration number. after, if
// set, runs untimed after each fn (a warm pool's refill). A case whose
// setup failed has skipped set and no fn.
type benchCase struct {
	name    string
	fn      func(i int) error
	after   func(i int) error
	skipped string
}

// interleave runs every case once to warm up, then n rounds of one run of
// each case in turn, so that load drifting on a shared machine hits the
// cases that are compared with each other alike.
func interleave(ctx context.Context, n int, cases []benchCase) []result {
	res := make([]result, len(cases))
	for i, c := range cases {
		res[i] = result{name: c.name, skipped: c.skipped}
	}
	for round := 0; round <= n; round++ {
		for i, c := range cases {
			if res[i].skipped != "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				res[i].skipped = err.Error()
				continue
			}
			start := time.Now()
			if err := c.fn(round); err != nil {
				res[i].skipped, res[i].samples = "failed: "+err.Error(), nil
				continue
			}
			if round > 0 {
				res[i].samples = append(res[i].samples, time.Since(start))
			}
			if c.after != nil {
				if err := c.after(round); err != nil {
					res[i].skipped, res[i].samples = "failed: "+err.Error(), nil
				}
			}
		}
	}
	return res
}

func run(ctx context.Context, o options, w io.Writer) error {
	state := o.stateDir
	if state == "" {
		dir, err := os.MkdirTemp("", "evalsi-bench-sandbox-")
		if err != nil {
			return fmt.Errorf("making state directory: %w", err)
		}
		defer os.RemoveAll(dir)
		state = dir
	}
	fmt.Fprintf(w, "evalsi sandbox benchmark: %s, %d CPUs, load %s, %s/%s\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), machine.LoadAvg(), runtime.GOOS, runtime.GOARCH)
	cpuStart, cpuErr := readCPUTimes()

	bw := bwrap.New(bwrap.Options{})
	ll := landlock.New()
	dk := docker.New()
	probes := map[string]sandbox.Probe{}
	for _, r := range []sandbox.Rung{bw, ll, dk} {
		p := r.Probe(ctx)
		probes[r.Name()] = p
		status := "works"
		if !p.Works {
			status = "skipped"
		}
		fmt.Fprintf(w, "  %-8s %s: %s\n", r.Name(), status, p.Reason)
	}
	fmt.Fprintln(w)

	const (
		bareName   = "bare bwrap --unshare-all … true"
		bashName   = "bare bash -c true (fork/exec)"
		bwrapName  = "bwrap rung, from setup snapshot"
		warmName   = "bwrap rung, warm pool take"
		cmdName    = "per command in a running sandbox"
		llName     = "landlock rung, from setup snapshot"
		dockerName = "docker rung, from setup snapshot"
		runRmName  = "docker run --rm (same image, API)"
	)
	smallName := fmt.Sprintf("bwrap rung, %d MB image root", o.smallMB)
	largeName := fmt.Sprintf("bwrap rung, %d MB image root", o.largeMB)

	// Namespace and Landlock rungs: fast, n rounds.
	var fast []benchCase
	var pool *warmBench
	closeCmd := func() {}
	if p := probes[bw.Name()]; p.Works {
		fast = append(fast, benchCase{name: bareName, fn: func(int) error { return bw.Bare(ctx, "true") }}, bashCase(ctx, bashName))
		dir := filepath.Join(state, "bwrap")
		if layer, err := setupSnapshot(ctx, bw, sandbox.Config{Workdir: "/workspace"}, filepath.Join(dir, "setup"), setupScript); err != nil {
			fast = append(fast, benchCase{name: bwrapName, skipped: err.Error()}, benchCase{name: warmName, skipped: err.Error()}, benchCase{name: cmdName, skipped: err.Error()})
		} else {
			var wc, cc benchCase
			wc, pool = warmCase(ctx, bw, warmName, layer, filepath.Join(dir, "warm"))
			cc, closeCmd = commandCase(ctx, bw, cmdName, layer, filepath.Join(dir, "cmd"))
			fast = append(fast, layerCase(ctx, bw, bwrapName, layer, filepath.Join(dir, "cold")), wc, cc)
		}
	} else {
		fast = append(fast, benchCase{name: bareName, skipped: p.Reason}, bashCase(ctx, bashName),
			benchCase{name: bwrapName, skipped: p.Reason}, benchCase{name: warmName, skipped: p.Reason}, benchCase{name: cmdName, skipped: p.Reason})
	}
	if p := probes[ll.Name()]; p.Works {
		fast = append(fast, snapshotCase(ctx, ll, llName, filepath.Join(state, "landlock")))
	} else {
		fast = append(fast, benchCase{name: llName, skipped: p.Reason})
	}
	for _, c := range []struct {
		name string
		mb   int
	}{{smallName, o.smallMB}, {largeName, o.largeMB}} {
		if p := probes[bw.Name()]; !p.Works {
			fast = append(fast, benchCase{name: c.name, skipped: p.Reason})
			continue
		}
		root, err := imageRoot(o.cacheDir, c.mb)
		if err != nil {
			fast = append(fast, benchCase{name: c.name, skipped: err.Error()})
			continue
		}
		dir := filepath.Join(state, fmt.Sprintf("root-%d", c.mb))
		fast = append(fast, benchCase{name: c.name, fn: func(i int) error {
			return cycle(ctx, bw, sandbox.Config{Root: root, Workdir: "/workspace", StateDir: filepath.Join(dir, strconv.Itoa(i))})
		}})
	}
	res := interleave(ctx, o.n, fast)
	closeCmd()
	if pool != nil {
		if err := pool.close(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench/sandbox: closing the warm pool:", err)
		}
	}

	// Docker: slow, its own rounds, against the bwrap rung measured above.
	if p := probes[dk.Name()]; p.Works {
		cases, cleanup := dockerCases(ctx, dk, dockerName, runRmName)
		res = append(res, interleave(ctx, o.dockerN, cases)...)
		cleanup()
	} else {
		res = append(res, result{name: dockerName, skipped: p.Reason}, result{name: runRmName, skipped: p.Reason})
	}

	// The qemu microVM rung: its own rounds (a boot is seconds under
	// software emulation), against the bwrap rung measured above.
	var vmNames vmCaseNames
	if o.vmN > 0 {
		cases, names := vmCases(ctx, o, filepath.Join(state, "qemu"))
		vmNames = names
		res = append(res, interleave(ctx, o.vmN, cases)...)
	}

	cpuEnd, cpuEndErr := readCPUTimes()

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// A rung's case is a trial's sandbox: create (or take) + exec `true`
	// + close; the bare cases and the per-command case are named.
	fmt.Fprintln(tw, "case\tn\tmedian\tmean\tmin\tmax\t")
	byName := map[string]result{}
	for _, r := range res {
		byName[r.name] = r
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\t-\tnot measured: %s\t\t\t\t\n", r.name, r.skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", r.name, len(r.samples), ms(r.median()), ms(r.mean()), ms(slices.Min(r.samples)), ms(slices.Max(r.samples)))
	}
	tw.Flush()
	if pool != nil && pool.timed > 0 {
		fmt.Fprintf(w, "warm hits %d/%d (timed takes a ready sandbox served; the refill and the close ran untimed between them)\n", pool.hits, pool.timed)
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// Medians decide; minimums show the uncontended cost when other work
	// shares the machine.
	fmt.Fprintln(tw, "ratio\tof medians\tof minimums\ttarget (medians)\tmet\t")
	for _, q := range []ratio{
		{"bwrap warm pool / bare bwrap", warmName, bareName, "≤ 1.5×", func(x float64) bool { return x <= 1.5 }},
		{"bwrap rung / bare bwrap", bwrapName, bareName, "", nil},
		{"per command / bare bash -c true", cmdName, bashName, "≤ 2×", func(x float64) bool { return x <= 2 }},
		{"docker run --rm / bwrap warm pool", runRmName, warmName, "≥ 30×", func(x float64) bool { return x >= 30 }},
		{"docker run --rm / bwrap rung", runRmName, bwrapName, "", nil},
		{"docker run --rm / landlock rung", runRmName, llName, "", nil},
		{"docker run --rm / docker rung", runRmName, dockerName, "", nil},
		{fmt.Sprintf("bwrap %d MB root / %d MB root", o.largeMB, o.smallMB), largeName, smallName, "≤ 2×", func(x float64) bool { return x <= 2 }},
		{"qemu cold boot / bwrap rung", vmNames.boot, bwrapName, "", nil},
		{"qemu restore from snapshot / bwrap rung", vmNames.restore, bwrapName, "", nil},
		{"qemu warm-pool take / bwrap rung", vmNames.pool, bwrapName, "", nil},
		{"qemu cold boot / qemu restore", vmNames.boot, vmNames.restore, "", nil},
	} {
		fmt.Fprintln(tw, q.row(byName))
	}
	tw.Flush()
	fmt.Fprintln(w)
	switch {
	case cpuErr != nil:
		fmt.Fprintln(w, "cpu steal over the run: unknown:", cpuErr)
	case cpuEndErr != nil:
		fmt.Fprintln(w, "cpu steal over the run: unknown:", cpuEndErr)
	default:
		if share, ok := stealShare(cpuStart, cpuEnd); ok {
			// On a VM the host may run others on this machine's CPUs; the
			// share it took inflates every figure above.
			fmt.Fprintf(w, "cpu steal over the run: %.1f%% of CPU time (/proc/stat: steal / all jiffies, start to end); load at the end %s\n", 100*share, machine.LoadAvg())
		} else {
			fmt.Fprintln(w, "cpu steal over the run: unknown (no CPU time passed in /proc/stat)")
		}
	}
	if load := machine.LoadAvg(); machine.Busy(load) {
		fmt.Fprintf(w, "note: the 1-minute load average (%s) exceeds the %d CPUs; other work shares the machine, so the figures are inflated and the ratios noisy\n", strings.Fields(load)[0], runtime.NumCPU())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return nil
}

// ratio is a row of the ratios table: num's figure over den's, with the
// target the medians' ratio must meet (ok nil: informational).
type ratio struct {
	label, num, den string
	target          string
	ok              func(float64) bool
}

// row is q's line of the ratios table (tab-separated cells) for results
// by case name.
func (q ratio) row(byName map[string]result) string {
	a, b := byName[q.num], byName[q.den]
	if a.skipped != "" || b.skipped != "" || len(a.samples) == 0 || len(b.samples) == 0 {
		return fmt.Sprintf("%s\tnot measured\t\t%s\t\t", q.label, q.target)
	}
	x := float64(a.median()) / float64(b.median())
	met := "(informational)"
	if q.ok != nil {
		met = "no"
		if q.ok(x) {
			met = "yes"
		}
	}
	xmin := float64(slices.Min(a.samples)) / float64(slices.Min(b.samples))
	return fmt.Sprintf("%s\t%.2f×\t%.2f×\t%s\t%s\t", q.label, x, xmin, q.target, met)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// cycle is one trial's sandbox lifetime: create, exec `true`, close.
func cycle(ctx context.Context, r sandbox.Rung, cfg sandbox.Config) error {
	sb, err := r.Create(ctx, cfg)
	if err != nil {
		return err
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
	cerr := sb.Close(ctx)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
	}
	if cerr != nil {
		return cerr
	}
	if cfg.StateDir != "" {
		return os.RemoveAll(cfg.StateDir)
	}
	return nil
}

// setupSnapshot runs script as setup in a fresh sandbox of base (no image:
// the host's system directories) and snapshots it, as environment.Prepare
// does.
func setupSnapshot(ctx context.Context, r sandbox.Rung, base sandbox.Config, stateDir, script string) (sandbox.Layer, error) {
	base.StateDir = stateDir
	sb, err := r.Create(ctx, base)
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("creating the setup sandbox: %w", err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("running setup: %w", err)
	}
	if res.ExitCode != 0 {
		return sandbox.Layer{}, fmt.Errorf("setup exited %d: %s", res.ExitCode, res.Stderr)
	}
	snap, ok := sb.(sandbox.Snapshotter)
	if !ok {
		return sandbox.Layer{}, fmt.Errorf("the %s rung cannot snapshot", r.Name())
	}
	layer, err := snap.Snapshot(ctx)
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting setup: %w", err)
	}
	return layer, nil
}

// setupScript is the setup every snapshot case runs.
const setupScript = "mkdir -p deps && echo ok > deps/installed"

func snapshotCase(ctx context.Context, r sandbox.Rung, name string, dir string) benchCase {
	layer, err := setupSnapshot(ctx, r, sandbox.Config{Workdir: "/workspace"}, filepath.Join(dir, "setup"), setupScript)
	if err != nil {
		return benchCase{name: name, skipped: err.Error()}
	}
	return layerCase(ctx, r, name, layer, dir)
}

// layerCase is a trial's cold sandbox from the setup snapshot layer: create
// + exec `true` + close, each with its own state directory under dir.
func layerCase(ctx context.Context, r sandbox.Rung, name string, layer sandbox.Layer, dir string) benchCase {
	return benchCase{name: name, fn: func(i int) error {
		return cycle(ctx, r, sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer}, StateDir: filepath.Join(dir, strconv.Itoa(i))})
	}}
}

// dockerCases are the docker rung from a setup snapshot and `docker run
// --rm true` of the very image (and host binds) its sandboxes use; cleanup
// removes the snapshot image.
func dockerCases(ctx context.Context, dk *docker.Rung, rungName, runRmName string) ([]benchCase, func()) {
	failed := func(err error) ([]benchCase, func()) {
		return []benchCase{{name: rungName, skipped: err.Error()}, {name: runRmName, skipped: err.Error()}}, func() {}
	}
	layer, err := setupSnapshot(ctx, dk, sandbox.Config{Workdir: "/workspace"}, "", setupScript)
	if err != nil {
		return failed(err)
	}
	cleanup := func() { dk.RemoveLayer(context.WithoutCancel(ctx), layer) }
	cfg := sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer}}
	sb, err := dk.Create(ctx, cfg)
	if err != nil {
		cleanup()
		return failed(err)
	}
	ds := sb.(*docker.Sandbox)
	img, binds := ds.Image(), ds.HostBinds()
	sb.Close(ctx)
	cli, err := dk.Client()
	if err != nil {
		cleanup()
		return failed(err)
	}
	hcfg := &container.HostConfig{NetworkMode: "none"}
	for _, d := range binds {
		hcfg.Binds = append(hcfg.Binds, d+":"+d+":ro")
	}
	runRm := func(int) error {
		c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Entrypoint: []string{}, Cmd: []string{"true"}}, hcfg, nil, nil, "")
		if err != nil {
			return fmt.Errorf("creating container: %w", err)
		}
		defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
		waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			return fmt.Errorf("starting container: %w", err)
		}
		select {
		case st := <-waitC:
			if st.StatusCode != 0 {
				return fmt.Errorf("true exited %d", st.StatusCode)
			}
		case err := <-errC:
			return fmt.Errorf("waiting for container: %w", err)
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			return fmt.Errorf("removing container: %w", err)
		}
		return nil
	}
	return []benchCase{
		{name: rungName, fn: func(int) error { return cycle(ctx, dk, cfg) }},
		{name: runRmName, fn: runRm},
	}, cleanup
}

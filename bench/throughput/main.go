// Command throughput measures, in one run, how fast the embedded engine
// gets through agent trials on this machine, next to the way Docker-based
// harnesses run the same trials, and prints both against the targets:
//
//   - N trials (default 1000) of a trivial scripted agent task with a setup
//     step (one bash tool call, then an answer; an exit-code checker), run
//     by the engine exactly as `evalsi run` runs them: bwrap sandboxes
//     restored from the setup snapshot, the default concurrency, every
//     event recorded in a SQLite store. Reported: trials/s, p50/p99 trial
//     latency, engine overhead per agent step (trial time not spent in
//     model calls or in the sandbox: scheduling, recording, evaluators, the
//     agent loop), peak RSS of the engine process.
//   - The same trials the Docker-harness way, through the Engine API: a
//     container per trial (create + start), setup repeated in it, one exec
//     per command (files, setup, the agent's command, the checker), then
//     removal; at the same concurrency. By default the same N trials, so
//     the ratio is of two measured wall times; -docker-n runs fewer and
//     extrapolates the wall time per trial.
//
// Build it with CGO_ENABLED=0 like the engine: the sandbox rungs
// re-execute this binary as their helpers.
//
//	CGO_ENABLED=0 go run ./bench/throughput [-n 1000] [-docker-n N] [-concurrency C] [-chatty-kb K]
//
// -chatty-kb makes the agent's command print K KiB (tool output is capped
// at 1 MiB per stream), to check that memory stays bounded under chatty
// trials; with -concurrency 64 it is the 64-concurrent check.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/warm"
	"evals.si/spec"
)

type options struct {
	n, dockerN, concurrency, chattyKB int
	keep                              bool
}

func main() {
	reexec.Init()
	var o options
	flag.IntVar(&o.n, "n", 1000, "engine trials")
	flag.IntVar(&o.dockerN, "docker-n", -1, "Docker-harness trials (default: as many as -n; fewer are extrapolated to -n; 0 skips them)")
	flag.IntVar(&o.concurrency, "concurrency", 0, "concurrent trials for both (default: the engine's, 2 × CPUs)")
	flag.IntVar(&o.chattyKB, "chatty-kb", 0, "make the agent's command print this many KiB")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary store and state directory and print where")
	flag.Parse()
	if o.dockerN == -1 {
		o.dockerN = o.n
	}
	if o.n < 1 || o.dockerN < 0 || o.concurrency < 0 || o.chattyKB < 0 {
		fmt.Fprintln(os.Stderr, "bench/throughput: -n must be positive; -docker-n, -concurrency and -chatty-kb not negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/throughput:", err)
		os.Exit(1)
	}
}

// task is the trivial agent task both harnesses run.
type task struct {
	files   map[string]string
	setup   string
	command string
	checker []string
}

func newTask(chattyKB int) task {
	cmd := "cat greeting.txt setup.txt"
	if chattyKB > 0 {
		cmd += fmt.Sprintf(" && head -c %d /dev/zero | tr '\\0' x", chattyKB<<10)
	}
	return task{
		files:   map[string]string{"greeting.txt": "hello\n"},
		setup:   "echo ready > setup.txt",
		command: cmd,
		checker: []string{"sh", "-c", "grep -q ready setup.txt && grep -q hello greeting.txt"},
	}
}

func run(ctx context.Context, o options, w io.Writer) error {
	dir, err := os.MkdirTemp("", "evalsi-throughput-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(w, "state kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	conc := o.concurrency
	if conc == 0 {
		conc = 2 * runtime.NumCPU()
	}
	tk := newTask(o.chattyKB)
	fmt.Fprintf(w, "machine: %d CPUs, %s/%s; concurrency %d\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, conc)
	if h, err := bwrap.DefaultHelper(); err == nil {
		if self, _ := reexec.Self(); h == self {
			fmt.Fprintf(w, "bwrap helper: this binary (no %s from the same clean build next to it; see the README)\n", bwrap.HelperName)
		} else {
			fmt.Fprintf(w, "bwrap helper: %s\n", h)
		}
	}

	eng, err := engineTrials(ctx, dir, o, tk)
	if err != nil {
		return fmt.Errorf("engine trials: %w", err)
	}
	var dk *dockerResult
	dkSkip := "skipped (-docker-n 0)"
	if o.dockerN > 0 {
		dk, err = dockerTrials(ctx, o.dockerN, conc, tk)
		if err != nil {
			dkSkip = "not measured: " + err.Error()
			dk = nil
		}
	}
	printReport(w, o, conc, eng, dk, dkSkip)
	return nil
}

// engineResult is what the engine run measured.
type engineResult struct {
	n, errored, failed int
	wall               time.Duration
	latencies          []time.Duration
	steps              int
	model, sbx, total  time.Duration
	lifecycle          time.Duration
	calls              int
	overhead           []float64 // per trial, per step, in ms
	peakRSS            int64     // bytes
	rung               string
	warm               warm.Stats
}

func engineTrials(ctx context.Context, dir string, o options, tk task) (*engineResult, error) {
	specPath, err := writeSpec(dir, o, tk)
	if err != nil {
		return nil, err
	}
	f, err := spec.Load(specPath)
	if err != nil {
		return nil, err
	}
	if err := f.Spec.Validate(); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	res := &engineResult{}
	var mu sync.Mutex
	onProgress := func(p engine.Progress) {
		mu.Lock()
		defer mu.Unlock()
		t := p.Last.Timing
		res.latencies = append(res.latencies, t.Total)
		res.steps += t.Steps
		res.model += t.Model
		res.sbx += t.Sandbox
		res.lifecycle += t.SandboxLifecycle
		res.calls += t.SandboxCalls
		res.total += t.Total
		if t.Steps > 0 {
			res.overhead = append(res.overhead, float64(t.Overhead())/float64(t.Steps)/1e6)
		}
		if res.rung == "" && len(p.Last.Isolation) > 0 {
			var rep sandbox.Report
			if json.Unmarshal(p.Last.Isolation, &rep) == nil {
				res.rung = rep.Rung
			}
		}
		if p.Done%200 == 0 {
			fmt.Fprintf(os.Stderr, "engine: %d/%d trials\n", p.Done, p.Total)
		}
	}
	start := time.Now()
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: onProgress})
	if err != nil {
		return nil, err
	}
	res.wall = time.Since(start)
	res.warm = app.Planner().Envs.WarmStats()
	res.n = len(res.latencies)
	res.errored = sum.Errored
	if v, ok := sum.Scores["task-success"]; ok {
		res.failed = res.n - int(v*float64(res.n)+0.5)
	}
	if sum.Status != engine.StatusCompleted {
		return nil, fmt.Errorf("run %s ended %s", sum.RunID, sum.Status)
	}
	if sum.Errored > 0 {
		return nil, fmt.Errorf("run %s: %d trials errored (%v); see evalsi runs show %s --store %s", sum.RunID, sum.Errored, sum.ErrorsByKind, sum.RunID, filepath.Join(dir, "evalsi.db"))
	}
	res.peakRSS = peakRSS()
	return res, nil
}

func writeSpec(dir string, o options, tk task) (string, error) {
	var recs bytes.Buffer
	for i := range o.n {
		fmt.Fprintf(&recs, `{"id": "t%05d", "input": "Print the greeting."}`+"\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "records.jsonl"), recs.Bytes(), 0o644); err != nil {
		return "", err
	}
	conc := ""
	if o.concurrency > 0 {
		conc = fmt.Sprintf("concurrency: %d\n", o.concurrency)
	}
	files := ""
	for name, content := range tk.files {
		files += fmt.Sprintf("    %s: %s\n", name, strconv.Quote(content))
	}
	checker := make([]string, len(tk.checker))
	for i, a := range tk.checker {
		checker[i] = strconv.Quote(a)
	}
	y := `name: throughput
` + conc + `dataset:
  path: records.jsonl
target:
  connector: scripted
  model: scripted-agent
  script:
    default:
      - tool_calls:
          - name: bash
            arguments: {command: ` + strconv.Quote(tk.command) + `}
      - content: "hello"
harness:
  builtin:
    max_steps: 5
environment:
  files:
` + files + `  setup:
    - ` + strconv.Quote(tk.setup) + `
  sandbox:
    workdir: /workspace
    network: deny
    ladder: [bwrap]
  checker:
    command: [` + strings.Join(checker, ", ") + `]
    parser: exit-code
evaluators: [task-success, agent-efficiency]
`
	p := filepath.Join(dir, "throughput.yaml")
	return p, os.WriteFile(p, []byte(y), 0o644)
}

// peakRSS is this process's peak resident set (VmHWM).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

type dockerResult struct {
	n    int
	wall time.Duration
}

// dockerTrials runs n trials the way Docker-based harnesses do, through
// the Engine API, with the image and read-only host binds the docker rung
// uses for an environment without an image (so both harnesses see the same
// files).
func dockerTrials(ctx context.Context, n, conc int, tk task) (*dockerResult, error) {
	dk := docker.New()
	if p := dk.Probe(ctx); !p.Works {
		return nil, errors.New(p.Reason)
	}
	sb, err := dk.Create(ctx, sandbox.Config{Workdir: "/workspace", StateDir: os.TempDir()})
	if err != nil {
		return nil, fmt.Errorf("finding the docker rung's image: %w", err)
	}
	ds, ok := sb.(*docker.Sandbox)
	if !ok {
		sb.Close(ctx)
		return nil, fmt.Errorf("docker rung returned a %T", sb)
	}
	img, binds := ds.Image(), ds.HostBinds()
	sb.Close(ctx)
	cli, err := dk.Client()
	if err != nil {
		return nil, err
	}
	hcfg := &container.HostConfig{NetworkMode: "none"}
	for _, d := range binds {
		hcfg.Binds = append(hcfg.Binds, d+":"+d+":ro")
	}
	// Warm up once (image and daemon caches), untimed.
	if err := dockerTrial(ctx, cli, img, hcfg, tk); err != nil {
		return nil, err
	}
	jobs := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range min(conc, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				errs <- dockerTrial(ctx, cli, img, hcfg, tk)
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &dockerResult{n: n, wall: wall}, nil
}

// dockerTrial is one trial: docker run (create + start a long-lived
// container), write the files and repeat the setup with docker exec, one
// docker exec for the agent's command and one for the checker, docker rm.
func dockerTrial(ctx context.Context, cli *client.Client, img string, hcfg *container.HostConfig, tk task) error {
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: img, Entrypoint: []string{}, Cmd: []string{"sleep", "infinity"}, WorkingDir: "/workspace",
	}, hcfg, nil, nil, "")
	if err != nil {
		return fmt.Errorf("creating container: %w", err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("starting container: %w", err)
	}
	var write strings.Builder
	write.WriteString("cd /workspace")
	names := make([]string, 0, len(tk.files))
	for name := range tk.files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&write, " && printf %%s %s > %s", shellQuote(tk.files[name]), shellQuote(name))
	}
	for _, argv := range [][]string{
		{"sh", "-c", write.String()},
		{"sh", "-c", tk.setup},
		{"sh", "-c", tk.command},
		tk.checker,
	} {
		code, out, err := dockerExec(ctx, cli, c.ID, argv)
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("docker exec %q exited %d: %s", argv, code, out)
		}
	}
	return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
}

func dockerExec(ctx context.Context, cli *client.Client, id string, argv []string) (int, string, error) {
	created, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: argv, WorkingDir: "/workspace", AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return -1, "", fmt.Errorf("docker exec create: %w", err)
	}
	hj, err := cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, "", fmt.Errorf("docker exec attach: %w", err)
	}
	defer hj.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, hj.Reader); err != nil {
		return -1, "", fmt.Errorf("docker exec output: %w", err)
	}
	for {
		in, err := cli.ContainerExecInspect(ctx, created.ID)
		if err != nil {
			return -1, "", fmt.Errorf("docker exec inspect: %w", err)
		}
		if !in.Running {
			tail := out.String()
			if len(tail) > 200 {
				tail = tail[:200]
			}
			return in.ExitCode, tail, nil
		}
		time.Sleep(time.Millisecond)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func median(f []float64) float64 {
	if len(f) == 0 {
		return 0
	}
	s := slices.Clone(f)
	slices.Sort(s)
	return s[len(s)/2]
}

func printReport(w io.Writer, o options, conc int, e *engineResult, d *dockerResult, dSkip string) {
	perTrial := e.wall / time.Duration(e.n)
	at1000 := perTrial * 1000
	overheadMean := 0.0
	if e.steps > 0 {
		overheadMean = float64(e.total-e.model-e.sbx) / float64(e.steps) / 1e6
	}
	fmt.Fprintf(w, "\nengine (%s rung, from the setup snapshot): %d trials in %s, %d steps, %d errored, %d failed the checker\n",
		e.rung, e.n, e.wall.Round(time.Millisecond), e.steps, e.errored, e.failed)
	per := func(d time.Duration) time.Duration { return (d / time.Duration(e.n)).Round(time.Microsecond) }
	fmt.Fprintf(w, "  per trial (mean): model %s; sandbox %s = prepare/create/close %s + %.1f calls (exec, files) %s; engine %s\n",
		per(e.model), per(e.sbx), per(e.lifecycle), float64(e.calls)/float64(e.n), per(e.sbx-e.lifecycle), per(e.total-e.model-e.sbx))
	fmt.Fprintf(w, "  sandboxes from the warm pool: %d of %d takes (the rest made on the spot)\n", e.warm.Hits, e.warm.Hits+e.warm.Misses)
	if d != nil {
		fmt.Fprintf(w, "docker harness (container per trial, exec per command): %d trials in %s at concurrency %d\n",
			d.n, d.wall.Round(time.Millisecond), min(conc, d.n))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tmeasured\ttarget\tmet")
	verdict := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	fmt.Fprintf(tw, "trials/s\t%.1f\t\t\n", float64(e.n)/e.wall.Seconds())
	label := "1000 trials wall"
	if e.n != 1000 {
		label += " (extrapolated)"
	}
	fmt.Fprintf(tw, "%s\t%.1f s\t≤ 10 s on 2 cores\t%s\n", label, at1000.Seconds(), verdict(at1000 <= 10*time.Second))
	fmt.Fprintf(tw, "trial latency p50\t%s\t\t\n", percentile(e.latencies, 0.50).Round(time.Microsecond))
	fmt.Fprintf(tw, "trial latency p99\t%s\t\t\n", percentile(e.latencies, 0.99).Round(time.Microsecond))
	fmt.Fprintf(tw, "engine overhead/step (mean)\t%.3f ms\t≤ 1 ms\t%s\n", overheadMean, verdict(overheadMean <= 1))
	fmt.Fprintf(tw, "engine overhead/step (median trial)\t%.3f ms\t≤ 1 ms\t%s\n", median(e.overhead), verdict(median(e.overhead) <= 1))
	fmt.Fprintf(tw, "peak RSS (engine process)\t%.1f MB\t\t\n", float64(e.peakRSS)/(1<<20))
	if d != nil {
		dPer := d.wall / time.Duration(d.n)
		ratio := float64(dPer) / float64(perTrial)
		fmt.Fprintf(tw, "docker harness wall/trial\t%s\t\t\n", dPer.Round(time.Microsecond))
		if d.n == e.n {
			ratio = float64(d.wall) / float64(e.wall)
			fmt.Fprintf(tw, "docker %d trials wall\t%.1f s\t\t\n", d.n, d.wall.Seconds())
		} else {
			fmt.Fprintf(tw, "docker %d trials wall (extrapolated from %d)\t%.1f s\t\t\n", e.n, d.n, (dPer * time.Duration(e.n)).Seconds())
		}
		fmt.Fprintf(tw, "throughput vs docker harness\t%.1f×\t≥ 25×\t%s\n", ratio, verdict(ratio >= 25))
	} else {
		fmt.Fprintf(tw, "throughput vs docker harness\t%s\t≥ 25×\t\n", dSkip)
	}
	tw.Flush()
	if o.chattyKB > 0 {
		fmt.Fprintf(w, "\nchatty: each trial's command printed %d KiB (tool output is kept up to 1 MiB per stream)\n", o.chattyKB)
	}
}

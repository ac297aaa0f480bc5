// Command server measures, in one run on this machine, how fast trials go
// through the team server next to embedded mode, and how fast the API
// answers meanwhile:
//
//   - embedded: N trivial trials (default 1000) through embedded.App.Run,
//     one in-process worker over a SQLite store, as `evalsi run` runs them;
//   - server: the same spec submitted through apiclient to `evalsid serve`
//     on a PostgreSQL cluster of the bench's own (Debian's binaries, a
//     temporary directory, loopback; or --pg-dsn), run by 2 `evalsid
//     worker` processes and waited for with Follow. The run's concurrency
//     caps both paths alike (the queue enforces it across workers);
//   - while the server run goes, a prober calls GET /v1/runs/{id} and GET
//     /v1/runs in turn and records their latencies.
//
// The trial is bench/throughput's by default (-trial agent: a scripted
// agent, one bash call in a bwrap sandbox restored from the setup
// snapshot, an exit-code checker): the cheapest trial that does what an
// agent trial does, so the ratio is what a team sees. -trial model is a
// plain model call to the scripted connector, nearly free, so the ratio
// is the server path's overhead alone (the worst case).
//
// Each of -n repetitions runs both, embedded first, after an untimed
// warm-up of each; the report gives every repetition and the medians.
//
//	CGO_ENABLED=0 go run ./bench/server [-trials 1000] [-n 3] [-trial agent|model]
//	    [-concurrency C] [-workers 2] [-evalsid BIN] [-pg-dsn DSN | -pg-fast] [-json]
//
// The bench's own PostgreSQL keeps its durable defaults (every commit
// waits for the disk), as the embedded SQLite store does
// (synchronous=FULL); -pg-fast turns fsync and synchronous_commit off to
// show what the commits cost. Besides throughput and latency the report
// gives the CPU per trial of each process (the bench process for
// embedded; the server, the workers with their sandboxes, PostgreSQL)
// and PostgreSQL's write transactions per trial, to show where the
// server path's time goes.
//
// Build it with CGO_ENABLED=0 like the engine: the sandbox rungs
// re-execute this binary (and evalsid) as their helpers.
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
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
)

type options struct {
	trials, reps, concurrency, workers int
	trial                              string
	evalsid, pgDSN                     string
	pgFast                             bool
	probeEvery                         time.Duration
	json, keep                         bool
}

func main() {
	reexec.Init()
	var o options
	flag.IntVar(&o.trials, "trials", 1000, "trials per run")
	flag.IntVar(&o.reps, "n", 3, "repetitions (each runs embedded, then the server)")
	flag.StringVar(&o.trial, "trial", "agent", "agent (bench/throughput's sandboxed agent trial) or model (a scripted model call)")
	flag.IntVar(&o.concurrency, "concurrency", 0, "the run's concurrency, on both paths (default: the engine's, 2 × CPUs)")
	flag.IntVar(&o.workers, "workers", 2, "evalsid worker processes")
	flag.StringVar(&o.evalsid, "evalsid", "", "the evalsid binary (default: built from this checkout into a temporary directory)")
	flag.StringVar(&o.pgDSN, "pg-dsn", "", "a PostgreSQL database for the server (default: a cluster of the bench's own)")
	flag.BoolVar(&o.pgFast, "pg-fast", false, "run the bench's own cluster with fsync and synchronous_commit off (the embedded SQLite store keeps synchronous=FULL)")
	flag.DurationVar(&o.probeEvery, "probe-every", 20*time.Millisecond, "pause between the prober's API calls")
	flag.BoolVar(&o.json, "json", false, "print the results as JSON")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (stores, logs) and print where")
	flag.Parse()
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/server:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/server:", err)
		os.Exit(1)
	}
}

func (o *options) check() error {
	if o.trials < 1 || o.reps < 1 || o.workers < 1 || o.concurrency < 0 || o.probeEvery < 0 {
		return errors.New("-trials, -n and -workers must be positive; -concurrency and -probe-every not negative")
	}
	if o.trial != "agent" && o.trial != "model" {
		return fmt.Errorf("-trial is agent or model, not %q", o.trial)
	}
	if o.concurrency == 0 {
		o.concurrency = 2 * runtime.NumCPU()
	}
	return nil
}

// pathResult is one timed run of one path.
type pathResult struct {
	Trials        int     `json:"trials"`
	WallSeconds   float64 `json:"wall_seconds"`
	TrialsPerSec  float64 `json:"trials_per_second"`
	LatencyP50MS  float64 `json:"trial_latency_p50_ms"`
	LatencyP99MS  float64 `json:"trial_latency_p99_ms"`
	MachineCPUMS  float64 `json:"machine_cpu_ms_per_trial"`
	ProcessCPUMS  float64 `json:"process_cpu_ms_per_trial,omitempty"`
	ServerCPUMS   float64 `json:"server_cpu_ms_per_trial,omitempty"`
	WorkersCPUMS  float64 `json:"workers_cpu_ms_per_trial,omitempty"`
	PostgresCPUMS float64 `json:"postgres_cpu_ms_per_trial,omitempty"`
	WriteTxPerTrl float64 `json:"write_transactions_per_trial,omitempty"`
}

// probeResult is what the prober saw during one server run.
type probeResult struct {
	GetRunCalls   int     `json:"get_run_calls"`
	GetRunP50MS   float64 `json:"get_run_p50_ms"`
	GetRunP99MS   float64 `json:"get_run_p99_ms"`
	ListRunsCalls int     `json:"list_runs_calls"`
	ListRunsP50MS float64 `json:"list_runs_p50_ms"`
	ListRunsP99MS float64 `json:"list_runs_p99_ms"`
	Errors        int     `json:"errors"`
}

type repResult struct {
	Embedded pathResult  `json:"embedded"`
	Server   pathResult  `json:"server"`
	Ratio    float64     `json:"ratio"`
	Probe    probeResult `json:"probe"`
}

type report struct {
	Machine     string      `json:"machine"`
	Trial       string      `json:"trial"`
	Trials      int         `json:"trials"`
	Concurrency int         `json:"concurrency"`
	Workers     int         `json:"workers"`
	Postgres    string      `json:"postgres"`
	Reps        []repResult `json:"repetitions"`
	Median      repResult   `json:"median"`
}

func run(ctx context.Context, o options, w io.Writer) error {
	dir, err := os.MkdirTemp("", "evalsi-bench-server-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "bench/server: state kept in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	rep := &report{Machine: machine(), Trial: o.trial, Trials: o.trials, Concurrency: o.concurrency, Workers: o.workers}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "embedded", "evalsi.db"), Logger: logger})
	if err != nil {
		return fmt.Errorf("opening the embedded app: %w", err)
	}
	defer app.Close()

	dsn, pgPID := o.pgDSN, 0
	rep.Postgres = "given (--pg-dsn)"
	if dsn == "" {
		pg, err := startPostgres(ctx, !o.pgFast)
		if err != nil {
			return fmt.Errorf("starting PostgreSQL: %w", err)
		}
		defer pg.stop()
		if dsn, err = createDatabase(ctx, pg.dsn("postgres"), "bench"); err != nil {
			return err
		}
		rep.Postgres = "own cluster, durable (fsync, synchronous_commit on)"
		if o.pgFast {
			rep.Postgres = "own cluster, fsync and synchronous_commit off"
		}
		pgPID = pg.pid()
	}
	bin := o.evalsid
	if bin == "" {
		if bin, err = buildEvalsid(ctx, dir); err != nil {
			return err
		}
	}
	d, err := deploy(ctx, bin, filepath.Join(dir, "server"), dsn, o.workers, o.concurrency)
	if err != nil {
		return err
	}
	defer d.stop()
	client, err := apiclient.New(d.url, userToken)
	if err != nil {
		return err
	}
	b := &bench{o: o, dir: dir, app: app, d: d, c: client, dsn: dsn, pgPID: pgPID}

	// Untimed: the first run of each path warms caches, the image
	// store, connection pools and the page cache.
	warm := min(o.trials, 2*o.concurrency)
	if _, err := b.embedded(ctx, warm); err != nil {
		return fmt.Errorf("embedded warm-up: %w", err)
	}
	if _, _, err := b.server(ctx, warm); err != nil {
		return fmt.Errorf("server warm-up: %w", err)
	}
	for i := range o.reps {
		fmt.Fprintf(os.Stderr, "bench/server: repetition %d/%d: embedded\n", i+1, o.reps)
		e, err := b.embedded(ctx, o.trials)
		if err != nil {
			return fmt.Errorf("embedded run: %w", err)
		}
		fmt.Fprintf(os.Stderr, "bench/server: repetition %d/%d: server (%.1f trials/s embedded)\n", i+1, o.reps, e.TrialsPerSec)
		s, p, err := b.server(ctx, o.trials)
		if err != nil {
			return fmt.Errorf("server run: %w", err)
		}
		rep.Reps = append(rep.Reps, repResult{Embedded: *e, Server: *s, Ratio: s.TrialsPerSec / e.TrialsPerSec, Probe: *p})
	}
	rep.Median = medianRep(rep.Reps)
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReport(w, rep)
	return nil
}

func createDatabase(ctx context.Context, adminDSN, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", fmt.Errorf("connecting to the bench's cluster: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return strings.Replace(adminDSN, "dbname=postgres", "dbname="+name, 1), nil
}

// bench holds what the repetitions share.
type bench struct {
	o   options
	dir string
	app *embedded.App
	d   *deployment
	c   *apiclient.Client
	dsn string
	// pgPID is the bench's own postmaster, whose CPU is reported (0 with
	// --pg-dsn: it may not be on this machine).
	pgPID int
}

// spec writes the run both paths get: its records in a JSONL file beside
// the spec for embedded mode and in the server's datasets_dir (where a
// submitted spec's dataset path resolves), so that the stored spec stays
// small as a team's would.
func (b *bench) spec(trials int) (*spec.File, error) {
	dir := filepath.Join(b.dir, "spec")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var recs bytes.Buffer
	for i := range trials {
		fmt.Fprintf(&recs, `{"id": "t%05d", "input": "Print the greeting.", "expected": "hello"}`+"\n", i)
	}
	name := fmt.Sprintf("records-%d.jsonl", trials)
	for _, d := range []string{dir, b.d.datasetsDir()} {
		if err := os.WriteFile(filepath.Join(d, name), recs.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(dir, "bench.yaml")
	f, err := spec.Parse(path, []byte(specYAML(b.o.trial, name, b.o.concurrency)))
	if err != nil {
		return nil, err
	}
	if err := f.Spec.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

// specYAML is the run both paths get.
func specYAML(kind, records string, concurrency int) string {
	var y strings.Builder
	fmt.Fprintf(&y, "name: bench-server\nconcurrency: %d\ndataset: {path: %s}\n", concurrency, records)
	if kind == "model" {
		y.WriteString(`target:
  connector: scripted
  model: scripted
  script:
    default:
      - content: "hello"
evaluators: [exact-match]
`)
		return y.String()
	}
	// bench/throughput's task.
	y.WriteString(`target:
  connector: scripted
  model: scripted-agent
  script:
    default:
      - tool_calls:
          - name: bash
            arguments: {command: "cat greeting.txt setup.txt"}
      - content: "hello"
harness:
  builtin:
    max_steps: 5
environment:
  files:
    greeting.txt: "hello\n"
  setup:
    - "echo ready > setup.txt"
  sandbox:
    workdir: /workspace
    network: deny
    ladder: [bwrap]
  checker:
    command: ["sh", "-c", "grep -q ready setup.txt && grep -q hello greeting.txt"]
    parser: exit-code
evaluators: [task-success, agent-efficiency]
`)
	return y.String()
}

func (b *bench) embedded(ctx context.Context, trials int) (*pathResult, error) {
	f, err := b.spec(trials)
	if err != nil {
		return nil, err
	}
	cpu0, busy0, start := cpuTime(os.Getpid()), machineBusy(), time.Now()
	sum, err := b.app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	cpu, busy := cpuTime(os.Getpid())-cpu0, machineBusy()-busy0
	if err := complete(sum, trials); err != nil {
		return nil, err
	}
	ts, err := b.app.Store().ListTrials(ctx, sum.RunID)
	if err != nil {
		return nil, fmt.Errorf("listing the trials of run %s: %w", sum.RunID, err)
	}
	lat := make([]time.Duration, 0, len(ts))
	for _, t := range ts {
		lat = append(lat, t.FinishedAt.Sub(t.StartedAt))
	}
	r := result(trials, wall, lat)
	r.MachineCPUMS, r.ProcessCPUMS = perTrial(busy, trials), perTrial(cpu, trials)
	return r, nil
}

func complete(sum *engine.Summary, trials int) error {
	if sum.Status != engine.StatusCompleted {
		return fmt.Errorf("run %s ended %s", sum.RunID, sum.Status)
	}
	if sum.Errored > 0 {
		return fmt.Errorf("run %s: %d trials errored (%v)", sum.RunID, sum.Errored, sum.ErrorsByKind)
	}
	if n := sum.Records * sum.Trials; n != trials {
		return fmt.Errorf("run %s has %d trials, not %d", sum.RunID, n, trials)
	}
	return nil
}

func (b *bench) server(ctx context.Context, trials int) (*pathResult, *probeResult, error) {
	f, err := b.spec(trials)
	if err != nil {
		return nil, nil, err
	}
	xid0, err := writeTransactions(ctx, b.dsn)
	if err != nil {
		return nil, nil, err
	}
	srv0, wrk0, pg0, busy0 := b.serverCPU()
	start := time.Now()
	run, err := b.c.Submit(ctx, "bench.yaml", f.Spec, "")
	if err != nil {
		return nil, nil, fmt.Errorf("submitting: %w", err)
	}
	pctx, stopProbe := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		probe *probeResult
	)
	wg.Add(1)
	go func() { defer wg.Done(); probe = b.probe(pctx, run.ID) }()
	// Follow polls too; every 50ms bounds what that adds to the wall time.
	final, err := b.c.Follow(ctx, run.ID, 50*time.Millisecond, nil)
	wall := time.Since(start)
	stopProbe()
	wg.Wait()
	srv1, wrk1, pg1, busy1 := b.serverCPU()
	if err != nil {
		return nil, nil, fmt.Errorf("following run %s: %w", run.ID, err)
	}
	if derr := b.d.alive(); derr != nil {
		return nil, nil, derr
	}
	if final.Summary == nil {
		return nil, nil, fmt.Errorf("run %s ended %s without a summary: %s", run.ID, final.Status, final.Error)
	}
	if err := complete(final.Summary, trials); err != nil {
		return nil, nil, err
	}
	xid1, err := writeTransactions(ctx, b.dsn)
	if err != nil {
		return nil, nil, err
	}
	tl, err := b.c.Trials(ctx, run.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the trials of run %s: %w", run.ID, err)
	}
	lat := make([]time.Duration, 0, len(tl.Trials))
	for _, t := range tl.Trials {
		lat = append(lat, t.FinishedAt.Sub(t.StartedAt))
	}
	r := result(trials, wall, lat)
	r.MachineCPUMS = perTrial(busy1-busy0, trials)
	r.ServerCPUMS, r.WorkersCPUMS = perTrial(srv1-srv0, trials), perTrial(wrk1-wrk0, trials)
	if b.pgPID != 0 {
		r.PostgresCPUMS = perTrial(pg1-pg0, trials)
	}
	// Less the two reads of the counter itself.
	r.WriteTxPerTrl = float64(xid1-xid0-1) / float64(trials)
	return r, probe, nil
}

// serverCPU is the CPU time so far of the server, of the workers (with
// their sandboxes), of PostgreSQL, and of the machine.
func (b *bench) serverCPU() (srv, workers, pg, busy time.Duration) {
	srv = cpuTime(b.d.server.cmd.Process.Pid)
	for _, w := range b.d.workers {
		workers += cpuTime(w.cmd.Process.Pid)
	}
	if b.pgPID != 0 {
		pg = treeCPU(b.pgPID)
	}
	return srv, workers, pg, machineBusy()
}

// writeTransactions is the cluster's transaction id counter: it moves by
// one per transaction that wrote (each a commit the disk waits for when
// durable), and by one for this read.
func writeTransactions(ctx context.Context, dsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("connecting to PostgreSQL to count transactions: %w", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&n); err != nil {
		return 0, fmt.Errorf("reading the transaction counter: %w", err)
	}
	return n, nil
}

// probe calls GET /v1/runs/{id} and GET /v1/runs in turn until ctx ends.
func (b *bench) probe(ctx context.Context, runID string) *probeResult {
	var get, list []time.Duration
	errs := 0
	for ctx.Err() == nil {
		t := time.Now()
		if _, err := b.c.Run(ctx, runID); err == nil {
			get = append(get, time.Since(t))
		} else if ctx.Err() == nil {
			errs++
		}
		sleep(ctx, b.o.probeEvery)
		t = time.Now()
		if _, err := b.c.Runs(ctx, 20, ""); err == nil {
			list = append(list, time.Since(t))
		} else if ctx.Err() == nil {
			errs++
		}
		sleep(ctx, b.o.probeEvery)
	}
	return &probeResult{
		GetRunCalls: len(get), GetRunP50MS: ms(percentile(get, 0.50)), GetRunP99MS: ms(percentile(get, 0.99)),
		ListRunsCalls: len(list), ListRunsP50MS: ms(percentile(list, 0.50)), ListRunsP99MS: ms(percentile(list, 0.99)),
		Errors: errs,
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func result(trials int, wall time.Duration, lat []time.Duration) *pathResult {
	return &pathResult{Trials: trials, WallSeconds: wall.Seconds(), TrialsPerSec: float64(trials) / wall.Seconds(),
		LatencyP50MS: ms(percentile(lat, 0.50)), LatencyP99MS: ms(percentile(lat, 0.99))}
}

func perTrial(d time.Duration, trials int) float64 { return ms(d) / float64(trials) }

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

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
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianRep is the median of each figure over the repetitions (the ratio
// is the median of each repetition's own ratio: neighbouring runs share
// the machine's load).
func medianRep(reps []repResult) repResult {
	m := func(get func(repResult) float64) float64 {
		v := make([]float64, len(reps))
		for i, r := range reps {
			v[i] = get(r)
		}
		return median(v)
	}
	path := func(get func(repResult) pathResult) pathResult {
		f := func(g func(pathResult) float64) float64 { return m(func(r repResult) float64 { return g(get(r)) }) }
		return pathResult{
			Trials:        get(reps[0]).Trials,
			WallSeconds:   f(func(p pathResult) float64 { return p.WallSeconds }),
			TrialsPerSec:  f(func(p pathResult) float64 { return p.TrialsPerSec }),
			LatencyP50MS:  f(func(p pathResult) float64 { return p.LatencyP50MS }),
			LatencyP99MS:  f(func(p pathResult) float64 { return p.LatencyP99MS }),
			MachineCPUMS:  f(func(p pathResult) float64 { return p.MachineCPUMS }),
			ProcessCPUMS:  f(func(p pathResult) float64 { return p.ProcessCPUMS }),
			ServerCPUMS:   f(func(p pathResult) float64 { return p.ServerCPUMS }),
			WorkersCPUMS:  f(func(p pathResult) float64 { return p.WorkersCPUMS }),
			PostgresCPUMS: f(func(p pathResult) float64 { return p.PostgresCPUMS }),
			WriteTxPerTrl: f(func(p pathResult) float64 { return p.WriteTxPerTrl }),
		}
	}
	return repResult{
		Embedded: path(func(r repResult) pathResult { return r.Embedded }),
		Server:   path(func(r repResult) pathResult { return r.Server }),
		Ratio:    m(func(r repResult) float64 { return r.Ratio }),
		Probe: probeResult{
			GetRunCalls:   int(m(func(r repResult) float64 { return float64(r.Probe.GetRunCalls) })),
			GetRunP50MS:   m(func(r repResult) float64 { return r.Probe.GetRunP50MS }),
			GetRunP99MS:   m(func(r repResult) float64 { return r.Probe.GetRunP99MS }),
			ListRunsCalls: int(m(func(r repResult) float64 { return float64(r.Probe.ListRunsCalls) })),
			ListRunsP50MS: m(func(r repResult) float64 { return r.Probe.ListRunsP50MS }),
			ListRunsP99MS: m(func(r repResult) float64 { return r.Probe.ListRunsP99MS }),
			Errors:        int(m(func(r repResult) float64 { return float64(r.Probe.Errors) })),
		},
	}
}

func machine() string {
	s := fmt.Sprintf("%d CPUs, %s/%s, load %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadAvg())
	if h, err := bwrap.DefaultHelper(); err == nil {
		if self, _ := reexec.Self(); h == self {
			s += "; bwrap helper: the engine binary (re-executed)"
		} else {
			s += "; bwrap helper: " + h
		}
	}
	return s
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func printReport(w io.Writer, r *report) {
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	fmt.Fprintf(w, "trial: %s; %d trials a run, concurrency %d on both paths; server: %d workers, PostgreSQL %s\n\n",
		r.Trial, r.Trials, r.Concurrency, r.Workers, r.Postgres)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rep\tembedded trials/s\tserver trials/s\tratio\tembedded p50/p99 ms\tserver p50/p99 ms\tGET run p50/p99 ms\tGET runs p50/p99 ms\t")
	row := func(name string, x repResult) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%.1f / %.1f\t%.1f / %.1f\t%.1f / %.1f\t%.1f / %.1f\t\n", name,
			x.Embedded.TrialsPerSec, x.Server.TrialsPerSec, x.Ratio,
			x.Embedded.LatencyP50MS, x.Embedded.LatencyP99MS, x.Server.LatencyP50MS, x.Server.LatencyP99MS,
			x.Probe.GetRunP50MS, x.Probe.GetRunP99MS, x.Probe.ListRunsP50MS, x.Probe.ListRunsP99MS)
	}
	for i, x := range r.Reps {
		row(fmt.Sprint(i+1), x)
	}
	row("median", r.Median)
	tw.Flush()

	m := r.Median
	verdict := "NO"
	if m.Ratio >= 0.8 {
		verdict = "yes"
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric (medians)\tembedded\tserver\ttarget")
	fmt.Fprintf(tw, "trials/s\t%.1f\t%.1f\t\n", m.Embedded.TrialsPerSec, m.Server.TrialsPerSec)
	fmt.Fprintf(tw, "ratio server/embedded\t\t%.2f\t≥ 0.8 — met: %s\n", m.Ratio, verdict)
	fmt.Fprintf(tw, "trial latency p50 / p99\t%.1f / %.1f ms\t%.1f / %.1f ms\t\n", m.Embedded.LatencyP50MS, m.Embedded.LatencyP99MS, m.Server.LatencyP50MS, m.Server.LatencyP99MS)
	fmt.Fprintf(tw, "API p99 while running: GET /v1/runs/{id} / GET /v1/runs\t\t%.1f / %.1f ms\t\n", m.Probe.GetRunP99MS, m.Probe.ListRunsP99MS)
	fmt.Fprintf(tw, "machine CPU per trial\t%.1f ms\t%.1f ms\t\n", m.Embedded.MachineCPUMS, m.Server.MachineCPUMS)
	pg := "not on this machine"
	if m.Server.PostgresCPUMS > 0 {
		pg = fmt.Sprintf("%.1f", m.Server.PostgresCPUMS)
	}
	fmt.Fprintf(tw, "  of it: engine process / server, workers, PostgreSQL\t%.1f ms\t%.1f, %.1f, %s ms\t\n", m.Embedded.ProcessCPUMS, m.Server.ServerCPUMS, m.Server.WorkersCPUMS, pg)
	fmt.Fprintf(tw, "PostgreSQL write transactions per trial\t\t%.1f\t\n", m.Server.WriteTxPerTrl)
	tw.Flush()
	if m.Probe.Errors > 0 {
		fmt.Fprintf(w, "\nthe prober's calls failed %d times (median per repetition)\n", m.Probe.Errors)
	}
}

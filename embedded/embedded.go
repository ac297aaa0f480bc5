// Package embedded hosts the engine in one process: a SQLite store in the
// user's data directory and the sandbox rungs of this host, with the
// planner (package planner) turning a loaded spec into a runnable plan.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"evals.si/dataset"
	"evals.si/dataset/traces"
	"evals.si/egress"
	"evals.si/engine"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/planner"
	"evals.si/regress"
	"evals.si/report"
	"evals.si/runqueue"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/firecracker"
	"evals.si/sandbox/host"
	"evals.si/sandbox/landlock"
	"evals.si/sandbox/qemu"
	"evals.si/sandbox/smolvm"
	"evals.si/sandbox/vm"
	"evals.si/sandbox/warm"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/telemetry"
)

// Options configure an embedded App.
type Options struct {
	// StorePath is the SQLite database (default: the user's data directory).
	StorePath string
	// StateDir holds images, sandboxes and proxy sockets (default: beside
	// the store).
	StateDir string
	Logger   *slog.Logger
	// Getenv reads API keys (default os.Getenv).
	Getenv func(string) string
	// Pool, when set, is the sandbox pool every sandbox is leased from
	// (see HostOptions.Pool).
	Pool Pool
}

// Pool is a sandbox pool seen from a host that runs no sandboxes itself.
type Pool interface {
	Rung() sandbox.Rung
	Images() environment.ImageResolver
	Egress() egress.Host
}

// App is an open embedded instance: this machine's Host and a SQLite
// store, with one in-process worker per run.
type App struct {
	*Host
	store  *store.Store
	logger *slog.Logger
	getenv func(string) string
}

// Rungs are the sandbox rungs this binary knows, in no particular order;
// the ladder decides which is used.
func Rungs() []sandbox.Rung {
	return []sandbox.Rung{
		// Firecracker boots an uncompressed vmlinux only: the documented
		// path, unless the spec names another.
		vm.New(vm.Options{VMM: firecracker.New(firecracker.Options{}), RawDisks: true,
			Settings: sandbox.VMSettings{Kernel: "/var/lib/evalsi/vmlinux"}}),
		vm.New(vm.Options{VMM: qemu.New(qemu.Options{})}),
		smolvm.New(smolvm.Options{}),
		bwrap.New(bwrap.Options{}),
		landlock.New(),
		docker.New(),
		host.New(),
	}
}

// HostOptions configure a Host.
type HostOptions struct {
	// StateDir holds images, sandboxes and proxy sockets (default: the
	// user's data directory's state/).
	StateDir string
	Logger   *slog.Logger
	// Getenv reads API keys (default os.Getenv).
	Getenv func(string) string
	// Pool, when set, is the sandbox pool (sandbox.address) this host
	// leases every sandbox from, instead of making them: its rung is the
	// only one, it resolves the images, and the egress proxies run beside
	// its sandboxes.
	Pool Pool
}

// Host is this machine as a place trials run: the image cache, the sandbox
// rungs and their environments, and the planner over them. Embedded mode
// and `evalsid worker` host the same way.
type Host struct {
	images   *image.Store
	planner  *planner.Host
	stateDir string
}

// OpenHost opens the caches under the state directory.
func OpenHost(ctx context.Context, o HostOptions) (*Host, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	stateDir := o.StateDir
	if stateDir == "" {
		p, err := store.DefaultPath()
		if err != nil {
			return nil, fmt.Errorf("finding the data directory (use --state-dir DIR): %w", err)
		}
		stateDir = filepath.Join(filepath.Dir(p), "state")
	}
	// Absolute: overlay mounts record their directories, and a relative
	// one would depend on the working directory of whoever looks later.
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("finding the state directory: %w", err)
	}
	if o.Pool != nil {
		rungs := []sandbox.Rung{o.Pool.Rung()}
		envs := environment.NewManager(o.Pool.Images(), rungs, filepath.Join(stateDir, "sandboxes"), o.Logger)
		envs.SetEgress(o.Pool.Egress())
		return &Host{
			planner: &planner.Host{
				Envs:     envs,
				Rungs:    rungs,
				Datasets: planner.Datasets(),
				Egress:   o.Pool.Egress(),
				Logger:   o.Logger,
				Getenv:   o.Getenv,
			},
			stateDir: stateDir,
		}, nil
	}
	imgs, err := image.Open(filepath.Join(stateDir, "images"), o.Logger)
	if err != nil {
		return nil, fmt.Errorf("opening image cache: %w", err)
	}
	rungs := Rungs()
	envs := environment.NewManager(imgs, rungs, filepath.Join(stateDir, "sandboxes"), o.Logger)
	// The namespace and Landlock rungs' trial sandboxes come from warm
	// pools; the microVM rungs keep pools of their own (warm_pool), and a
	// Docker container held ready would hold a daemon's resources.
	envs.WarmPools([]string{sandbox.RungBwrap, sandbox.RungLandlock}, warm.Options{})
	return &Host{
		images: imgs,
		planner: &planner.Host{
			Envs:     envs,
			Rungs:    rungs,
			Datasets: planner.Datasets(),
			ProxyDir: filepath.Join(stateDir, "proxy"),
			Logger:   o.Logger,
			Getenv:   o.Getenv,
		},
		stateDir: stateDir,
	}, nil
}

// Planner is the host's planner.
func (h *Host) Planner() *planner.Host { return h.planner }

// Datasets is the URI scheme registry, for registering importers.
func (h *Host) Datasets() *dataset.Registry { return h.planner.Datasets }

// Close removes the setup snapshots the host made.
func (h *Host) Close() error { return h.planner.Envs.Close() }

// Open opens the store and the caches.
func Open(ctx context.Context, o Options) (*App, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	path := o.StorePath
	if path == "" {
		p, err := store.DefaultPath()
		if err != nil {
			return nil, fmt.Errorf("finding the data directory for the store (use --store PATH): %w", err)
		}
		path = p
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating store directory: %w", err)
	}
	st, err := store.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	stateDir := o.StateDir
	if stateDir == "" {
		stateDir = filepath.Join(filepath.Dir(path), "state")
	}
	h, err := OpenHost(ctx, HostOptions{StateDir: stateDir, Logger: o.Logger, Getenv: o.Getenv, Pool: o.Pool})
	if err != nil {
		st.Close()
		return nil, err
	}
	ds := h.Datasets()
	ds.ServeRuns(regress.NewRunSource(st, o.Logger))
	// Embedded mode reads what its user can: any traces URL, any file.
	ds.ServeTraces(traces.NewSource(traces.Options{Logger: o.Logger}))
	return &App{Host: h, store: st, logger: o.Logger, getenv: o.Getenv}, nil
}

// Store is the app's store.
func (a *App) Store() *store.Store { return a.store }

// Close removes the run's setup snapshots and releases the store.
func (a *App) Close() error {
	return errors.Join(a.Host.Close(), a.store.Close())
}

// RunOptions tune one run.
type RunOptions struct {
	OnProgress func(engine.Progress)
	// OnRunning, when set, is called when the number of trials in flight
	// changes, with Progress.Running updated and Last nil (OnProgress is
	// called only when a trial finishes).
	OnRunning func(engine.Progress)
	// MaxCostUSD (--max-cost), when positive, caps the run's spend in USD
	// (every attempt's cost, retries included), overriding the spec's
	// budget.usd: once spend reaches it no further trial starts, and the
	// rest wait for a resume. Run stores it with the run's spec, so a later
	// resume keeps the cap; Resume's replaces it for that resume.
	MaxCostUSD float64
	// MaxTokens, when positive, overrides budget.tokens the same way.
	MaxTokens int
}

// budgetErr refuses a negative cap: a usage error.
func (o RunOptions) budgetErr() error {
	switch {
	case o.MaxCostUSD < 0 || math.IsNaN(o.MaxCostUSD) || math.IsInf(o.MaxCostUSD, 0):
		return SpecError{Err: fmt.Errorf("--max-cost %v: give a positive amount of USD (e.g. --max-cost 5), or leave it out for no cap", o.MaxCostUSD)}
	case o.MaxTokens < 0:
		return SpecError{Err: fmt.Errorf("the token cap %d is negative: give a positive number of tokens, or 0 for none", o.MaxTokens)}
	}
	return nil
}

// withBudget is s with o's caps written into its top-level budget (s
// itself unchanged), so the spec stored with the run holds the cap it ran
// under.
func (o RunOptions) withBudget(s *spec.Spec) *spec.Spec {
	if o.MaxCostUSD <= 0 && o.MaxTokens <= 0 {
		return s
	}
	c := *s
	var b spec.Budget
	if s.Budget != nil {
		b = *s.Budget
	}
	if o.MaxCostUSD > 0 {
		b.USD = o.MaxCostUSD
	}
	if o.MaxTokens > 0 {
		b.Tokens = o.MaxTokens
	}
	c.Budget = &b
	return &c
}

// SpecError is a problem with the spec found while building the plan (an
// unknown parser, a missing key): a usage error, exit 2.
type SpecError = planner.SpecError

// Run runs a validated spec to completion (or interruption): the run and
// its pending trials go to the store, one in-process worker leases and runs
// them, and the run is finalized from what the store holds, as on a server.
func (a *App) Run(ctx context.Context, f *spec.File, o RunOptions) (*engine.Summary, error) {
	if err := o.budgetErr(); err != nil {
		return nil, err
	}
	records, err := a.planner.Records(ctx, f)
	if err != nil {
		return nil, err
	}
	plan, err := a.planner.Plan(ctx, f)
	if err != nil {
		return nil, err
	}
	defer closePlan(plan)
	// Before the run writes anything, the store learns the run's secrets,
	// and redacts them from every text it keeps.
	a.store.AddSecrets(f.Spec.SecretValues(a.getenv)...)
	run, err := runqueue.Submit(ctx, a.store, runqueue.Submission{
		Name: plan.Name, SpecPath: plan.SpecPath, Spec: o.withBudget(f.Spec), Records: records, Limits: plan.Limits,
	})
	if err != nil {
		return nil, err
	}
	budget := engine.NewBudget(engine.RunBudgetOf(f.Spec, o.MaxCostUSD, o.MaxTokens), time.Now())
	return a.work(ctx, run.ID, plan, len(records), nil, budget, o)
}

func closePlan(p *engine.Plan) {
	if p.Close != nil {
		p.Close()
	}
}

// onePlan gives the in-process worker the plan already built; the caller
// closes it.
type onePlan struct {
	runID string
	plan  *engine.Plan
}

func (p onePlan) Plan(_ context.Context, runID string) (*engine.Plan, error) {
	if runID != p.runID {
		return nil, fmt.Errorf("this worker runs only run %s, not %s", p.runID, runID)
	}
	c := *p.plan
	c.Close = nil
	return &c, nil
}

// work runs a submitted (or reopened) run's trials with one in-process
// worker and finalizes it. done are its trials finished before (resume),
// for progress. With OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set, the run is
// also exported as spans.
func (a *App) work(ctx context.Context, runID string, plan *engine.Plan, records int, done []*engine.Outcome, budget *engine.Budget, o RunOptions) (*engine.Summary, error) {
	tr, err := telemetry.Start(ctx, telemetry.WithRedact(a.store.RedactJSON))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := tr.Shutdown(context.WithoutCancel(ctx)); err != nil {
			a.logger.Warn("exporting the run's spans", "err", err)
		}
	}()
	tr.RunStarted(ctx, telemetry.RunInfo{ID: runID, Name: plan.Name, SpecPath: plan.SpecPath, Records: records, Trials: plan.Limits.Trials, Spec: plan.Spec})
	tracker := engine.NewTracker(records*plan.Limits.Trials, plan.Pass, plan.Providers)
	for _, d := range done {
		tracker.Add(d)
	}
	start := time.Now()
	var (
		mu         sync.Mutex
		unrecorded error
	)
	w := &engine.Worker{
		Queue:        tr.Queue(runqueue.New(a.store)),
		Plans:        onePlan{runID: runID, plan: plan},
		Name:         "embedded",
		Slots:        plan.Limits.Concurrency,
		Runs:         []string{runID},
		ExitWhenIdle: true,
		Budget:       budget,
		Logger:       a.logger.With("run", runID),
		OnOutcome: func(oc *engine.Outcome, final bool) {
			if final && o.OnProgress != nil {
				o.OnProgress(tracker.Add(oc))
			}
		},
		OnInFlight: func(n int) {
			if o.OnRunning != nil {
				o.OnRunning(tracker.SetRunning(n))
			}
		},
		OnUnrecorded: func(_ *engine.Lease, err error) {
			mu.Lock()
			defer mu.Unlock()
			if unrecorded == nil {
				unrecorded = err
			}
		},
	}
	if err := w.Run(ctx); err != nil {
		return nil, err
	}
	// Record the end even when interrupted: the caller's context is done.
	sum, err := runqueue.Finalize(context.WithoutCancel(ctx), a.store, runID, runqueue.FinalizeOptions{
		Evaluators: plan.Evaluators, Interrupted: ctx.Err() != nil, Elapsed: time.Since(start), Unrecorded: unrecorded,
		Stopped: budget.Stopped(),
	})
	if sum != nil {
		errMsg := ""
		if sum.Status == engine.StatusFailed {
			errMsg = "trials could not be recorded"
		}
		tr.RunFinished(runID, sum.Status, sum, errMsg)
	}
	return sum, err
}

// RunDetail loads a run with its trials and scores.
func (a *App) RunDetail(ctx context.Context, id string) (report.RunDetail, error) {
	return report.LoadRunDetail(ctx, a.store, id)
}

// WriteJUnit writes the run's JUnit XML report to path.
func (a *App) WriteJUnit(ctx context.Context, runID, path string) error {
	d, err := a.RunDetail(ctx, runID)
	if err != nil {
		return err
	}
	var pass string
	if s, err := d.Run.DecodeSpec(); err == nil {
		for _, e := range s.Evaluators {
			if e.Name == "task-success" {
				pass = "task-success"
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.WriteJUnit(f, d, pass); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

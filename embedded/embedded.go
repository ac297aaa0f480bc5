// Package embedded hosts the engine in one process: a SQLite store in the
// user's data directory, the sandbox rungs of this host, and the wiring from
// a loaded spec to a runnable plan.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"evals.si/dataset"
	"evals.si/engine"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/report"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
	"evals.si/sandbox/docker"
	"evals.si/sandbox/host"
	"evals.si/sandbox/landlock"
	"evals.si/sandbox/smolvm"
	"evals.si/sandbox/vmprobe"
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
}

// App is an open embedded instance.
type App struct {
	store    *store.Store
	images   *image.Store
	envs     *environment.Manager
	rungs    []sandbox.Rung
	datasets *dataset.Registry
	logger   *slog.Logger
	stateDir string
	getenv   func(string) string
}

// Rungs are the sandbox rungs this binary knows, in no particular order;
// the ladder decides which is used.
func Rungs() []sandbox.Rung {
	return []sandbox.Rung{
		vmprobe.Firecracker(),
		smolvm.New(smolvm.Options{}),
		bwrap.New(bwrap.Options{}),
		landlock.New(),
		docker.New(),
		host.New(),
	}
}

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
	// Absolute: overlay mounts record their directories, and a relative
	// one would depend on the working directory of whoever looks later.
	if stateDir, err = filepath.Abs(stateDir); err != nil {
		st.Close()
		return nil, fmt.Errorf("finding the state directory: %w", err)
	}
	imgs, err := image.Open(filepath.Join(stateDir, "images"), o.Logger)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("opening image cache: %w", err)
	}
	rungs := Rungs()
	return &App{
		store:    st,
		images:   imgs,
		rungs:    rungs,
		envs:     environment.NewManager(imgs, rungs, filepath.Join(stateDir, "sandboxes"), o.Logger),
		datasets: benchDatasets(),
		logger:   o.Logger,
		stateDir: stateDir,
		getenv:   o.Getenv,
	}, nil
}

// Store is the app's store.
func (a *App) Store() *store.Store { return a.store }

// Datasets is the URI scheme registry, for registering importers.
func (a *App) Datasets() *dataset.Registry { return a.datasets }

// Close removes the run's setup snapshots and releases the store.
func (a *App) Close() error {
	return errors.Join(a.envs.Close(), a.store.Close())
}

// RunOptions tune one run.
type RunOptions struct {
	OnProgress func(engine.Progress)
}

// SpecError is a problem with the spec found while building the plan (an
// unknown parser, a missing key): a usage error, exit 2.
type SpecError struct{ Err error }

func (e SpecError) Error() string { return e.Err.Error() }
func (e SpecError) Unwrap() error { return e.Err }

// Run runs a validated spec to completion (or interruption).
func (a *App) Run(ctx context.Context, f *spec.File, o RunOptions) (*engine.Summary, error) {
	plan, err := a.plan(ctx, f)
	if err != nil {
		return nil, err
	}
	defer a.closePlan(plan)
	return a.execute(ctx, plan, o)
}

// execute runs a plan (new or resumed). With
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set, the run is also exported as
// spans; otherwise the recorder is the store recorder itself.
func (a *App) execute(ctx context.Context, plan *engine.Plan, o RunOptions) (*engine.Summary, error) {
	rec, stopTracing, err := telemetry.Wrap(ctx, &recorder{store: a.store, getenv: a.getenv})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := stopTracing(context.WithoutCancel(ctx)); err != nil {
			a.logger.Warn("exporting the run's spans", "err", err)
		}
	}()
	e := &engine.Engine{Recorder: rec, Logger: a.logger, OnProgress: o.OnProgress}
	return e.Run(ctx, plan)
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

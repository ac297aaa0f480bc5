// Package remoteworker is `evalsid worker --server URL`: an engine.Worker
// that leases trials from a server over its API, plans each run it meets
// from the run's stored spec with this machine's planner (its sandbox
// rungs, its credentials), and reports events and outcomes back with its
// secrets redacted. Secrets stay on the worker; the server never has them.
package remoteworker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"evals.si/apiclient"
	"evals.si/engine"
	"evals.si/planner"
	"evals.si/spec"
	"evals.si/store"
)

// Options configure a remote worker.
type Options struct {
	Client *apiclient.Client
	Host   *planner.Host
	// Name identifies this worker on its leases (default: hostname-pid).
	Name  string
	Slots int
	TTL   time.Duration
	Poll  time.Duration
	// Dir is where relative paths of a spec (a script file, a harness
	// command) resolve on this worker (default: the working directory).
	Dir    string
	Logger *slog.Logger
	// Getenv reads the secrets the runs name (default os.Getenv).
	Getenv func(string) string
	// AllowUnsafeHost lets runs use the host rung (no sandbox) on this
	// worker; the server must allow it too.
	AllowUnsafeHost bool
	// Metrics, when set, counts what the worker does (--metrics-listen).
	Metrics *Metrics
}

// Run leases and runs trials until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Name == "" {
		h, _ := os.Hostname()
		o.Name = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("finding the working directory: %w", err)
		}
		o.Dir = wd
	}
	red := &store.Redaction{}
	var q engine.Queue = newCancelQueue(o.Client.Queue(red.JSON), o.Logger.With("worker", o.Name))
	if o.Metrics != nil {
		q = o.Metrics.queue(q)
	}
	w := &engine.Worker{
		Queue:  q,
		Plans:  &plans{o: o, redact: red},
		Name:   o.Name,
		Slots:  o.Slots,
		TTL:    o.TTL,
		Poll:   o.Poll,
		Logger: o.Logger.With("worker", o.Name),
	}
	o.Logger.Info("worker started", "worker", o.Name, "slots", o.Slots)
	return w.Run(ctx)
}

// plans plans a leased run from its stored spec.
type plans struct {
	o      Options
	redact *store.Redaction
}

func (p *plans) Plan(ctx context.Context, runID string) (*engine.Plan, error) {
	rs, err := p.o.Client.RunSpec(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("reading the spec of run %s: %w", runID, err)
	}
	var s spec.Spec
	if err := json.Unmarshal(rs.Spec, &s); err != nil {
		return nil, fmt.Errorf("decoding the spec of run %s: %w", runID, err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("the spec of run %s does not validate here: %w", runID, err)
	}
	// The server refuses the host rung unless its operator allows it; this
	// worker refuses it too unless its own operator does.
	if sb := s.Environment; sb != nil && sb.Sandbox != nil && (sb.Sandbox.AllowUnsafeHost || slices.Contains(sb.Sandbox.Ladder, "host")) && !p.o.AllowUnsafeHost {
		return nil, fmt.Errorf("run %s asks for the host rung (model output outside any sandbox); this worker refuses it (evalsid worker --allow-unsafe-host opens it)", runID)
	}
	// Before the first event of the run leaves this machine.
	p.redact.AddSecrets(s.SecretValues(p.o.Getenv)...)
	name := filepath.Base(rs.SpecPath)
	if name == "." || name == "/" {
		name = "spec.yaml"
	}
	f := &spec.File{Spec: &s, Path: filepath.Join(p.o.Dir, name), Dir: p.o.Dir}
	plan, err := p.o.Host.Plan(ctx, f)
	if err != nil {
		return nil, err
	}
	return plan, nil
}

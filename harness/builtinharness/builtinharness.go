// Package builtinharness serves the built-in tool-calling agent
// (agent/builtin) over the harness protocol: its model is Worker.Chat and
// its sandbox is Worker.Exec, ReadFile and WriteFile. It is the built-in
// harness reachable through the same interface as any external one, which
// lets one conformance suite cover every form.
package builtinharness

import (
	"context"
	"errors"
	"log/slog"

	"evals.si/agent"
	"evals.si/agent/builtin"
	"evals.si/harness/server"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Name is what Describe answers.
const Name = "evalsi-builtin"

// Harness is the built-in agent as a protocol harness.
type Harness struct {
	cfg     spec.Builtin
	version string
	log     *slog.Logger
}

var _ server.Harness = (*Harness)(nil)

// New returns the built-in harness configured as harness.builtin would
// configure the built-in agent. Prices are left to the worker, which meters
// Worker.Chat; logger may be nil.
func New(cfg spec.Builtin, version string, logger *slog.Logger) *Harness {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Harness{cfg: cfg, version: version, log: logger}
}

// Describe implements server.Harness. The built-in agent has no verdict of
// its own: no check capability.
func (h *Harness) Describe(context.Context) (server.Info, error) {
	return server.Info{Name: Name, Version: h.version}, nil
}

// Setup implements server.Harness: the agent is per trial, because the
// tool-call protocol is resolved (and probed) against this trial's
// Worker.Chat.
func (h *Harness) Setup(_ context.Context, t *server.Trial) error {
	t.State = builtin.New(t.Worker, t.Task.Model, h.cfg, nil, h.log)
	return nil
}

// Run implements server.Harness.
func (h *Harness) Run(ctx context.Context, t *server.Trial, emit func(trajectory.Event) error) (server.Result, error) {
	a, ok := t.State.(*builtin.Agent)
	if !ok {
		return server.Result{}, errors.New("builtin harness: trial was not set up")
	}
	res, err := a.Run(ctx, agent.Task{
		RecordID: t.Task.RecordID, Trial: t.Task.Trial, Instruction: t.Task.Instruction, Input: t.Task.Input,
		Sandbox: t.Worker, Workdir: t.Task.Workdir, CommandTimeout: t.Task.CommandTimeout,
		Emit: trajectory.SinkFunc(func(e trajectory.Event) error {
			if e.Kind == trajectory.KindPolicy {
				// The worker records the sandbox's denials itself.
				return nil
			}
			return emit(e)
		}),
	})
	if err != nil {
		return server.Result{}, err
	}
	return server.Result{Output: res.Output, StopReason: res.StopReason}, nil
}

// Check implements server.Harness: no verdict.
func (h *Harness) Check(context.Context, *server.Trial) (*server.Verdict, error) { return nil, nil }

// Teardown implements server.Harness.
func (h *Harness) Teardown(_ context.Context, t *server.Trial) error {
	t.State = nil
	return nil
}

package planner

import (
	"context"
	"fmt"

	"evals.si/agent/builtin"
	"evals.si/agent/tools"
	"evals.si/agent/tools/mcptools"
	"evals.si/spec"
)

// builtinTools gives the built-in agent harness.builtin.tools: it reaches
// every MCP server and lists its tools now, so an unreachable server fails
// the run at its start, builds the mocks, checks that no two tools share a
// name, and sets the fault rules, seeded by the run's name so a rerun of
// the spec injects the same faults. dir is the spec file's directory, a
// stdio server's working directory.
func (h *Host) builtinTools(ctx context.Context, at where, dir, run string, b *builtin.Agent, t *spec.Tools) error {
	if t == nil {
		return nil
	}
	var providers []tools.Provider
	for i, m := range t.MCP {
		src := fmt.Sprintf("harness.builtin.tools.mcp[%d]", i)
		if err := mcptools.Validate(src, m); err != nil {
			return SpecError{at.Errorf(src, "%v", err)}
		}
		s, err := mcptools.Connect(ctx, src, m, mcptools.Options{Getenv: h.getenv(), Dir: dir, Logger: h.logger()})
		if err != nil {
			// Not a SpecError: the spec may be right and the server down.
			return fmt.Errorf("reaching an MCP server at the run's start: %w", at.Errorf(src, "%v", err))
		}
		providers = append(providers, s)
	}
	for i, m := range t.Mocks {
		src := fmt.Sprintf("harness.builtin.tools.mocks[%d]", i)
		mk, err := tools.NewMock(src, m)
		if err != nil {
			return SpecError{at.Errorf(src, "%v", err)}
		}
		providers = append(providers, mk)
	}
	if len(providers) > 0 {
		if err := b.AddTools(providers...); err != nil {
			return SpecError{at.Errorf("harness.builtin.tools", "%v", err)}
		}
	}
	if len(t.Faults) > 0 {
		faults, err := tools.NewFaults(run, t.Faults)
		if err != nil {
			return SpecError{at.Errorf("harness.builtin.tools.faults", "%v", err)}
		}
		if err := b.SetFaults(faults); err != nil {
			return SpecError{at.Errorf("harness.builtin.tools.faults", "%v", err)}
		}
	}
	return nil
}

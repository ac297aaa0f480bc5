package embedded

import (
	"context"

	"evals.si/agent"
	"evals.si/agent/oracle"
	"evals.si/model"
	"evals.si/spec"
)

// targetAgent builds the caller's own agent from target.agent. Each kind
// has its own case; a kind this build cannot drive is refused at start.
func (a *App) targetAgent(ctx context.Context, f *spec.File, records []spec.Record, mopts model.Options) (agent.Agent, error) {
	t := f.Spec.Target.Agent
	switch {
	case t.Oracle != nil:
		return oracle.New(records), nil
	}
	return nil, SpecError{f.Errorf("target.agent", "this target.agent kind is not supported by this build yet; use the built-in agent (target: {connector, model} with harness: {builtin: {}}) or target.agent.oracle")}
}

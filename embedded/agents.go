package embedded

import (
	"context"

	"evals.si/agent"
	"evals.si/agent/a2a"
	"evals.si/agent/cli"
	"evals.si/agent/httpagent"
	"evals.si/agent/mcpagent"
	"evals.si/agent/oracle"
	"evals.si/agent/responses"
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
	case t.CLI != nil:
		ag, err := cli.FromSpec(f.Spec, a.getenv, a.logger)
		if err != nil {
			return nil, SpecError{f.Errorf("target.agent.cli", "%v", err)}
		}
		return ag, nil
	case t.A2A != nil:
		ag, err := a2a.New(*t.A2A, mopts)
		return remoteAgent(f, "target.agent.a2a", ag, err)
	case t.MCP != nil:
		ag, err := mcpagent.New(*t.MCP, mopts)
		return remoteAgent(f, "target.agent.mcp", ag, err)
	case t.Responses != nil:
		ag, err := responses.New(*t.Responses, mopts, model.DefaultPricing())
		return remoteAgent(f, "target.agent.responses", ag, err)
	case t.HTTP != nil:
		ag, err := httpagent.New(*t.HTTP, mopts)
		return remoteAgent(f, "target.agent.http", ag, err)
	}
	return nil, SpecError{f.Errorf("target.agent", "this target.agent kind is not supported by this build yet; use the built-in agent (target: {connector, model} with harness: {builtin: {}}) or target.agent.oracle")}
}

// remoteAgent turns a remote kind's constructor error into a spec error
// at field: the remote kinds (a2a, mcp, responses, http) only fail to build
// on bad settings.
func remoteAgent[A agent.Agent](f *spec.File, field string, ag A, err error) (agent.Agent, error) {
	if err != nil {
		return nil, SpecError{f.Errorf(field, "%v", err)}
	}
	return ag, nil
}

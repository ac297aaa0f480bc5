package planner

import (
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
func (h *Host) targetAgent(at where, target spec.Target, harness *spec.Harness, mopts model.Options) (agent.Agent, error) {
	t := target.Agent
	switch {
	case t.Oracle != nil:
		return oracle.New(), nil
	case t.CLI != nil:
		// The CLI agent reads target.agent.cli and harness.builtin's
		// pricing and budget.
		ag, err := cli.FromSpec(&spec.Spec{Target: target, Harness: harness}, h.getenv(), h.logger())
		if err != nil {
			return nil, SpecError{at.Errorf("target.agent.cli", "%v", err)}
		}
		return ag, nil
	case t.A2A != nil:
		ag, err := a2a.New(*t.A2A, mopts)
		return remoteAgent(at, "target.agent.a2a", ag, err)
	case t.MCP != nil:
		ag, err := mcpagent.New(*t.MCP, mopts)
		return remoteAgent(at, "target.agent.mcp", ag, err)
	case t.Responses != nil:
		ag, err := responses.New(*t.Responses, mopts, model.DefaultPricing())
		return remoteAgent(at, "target.agent.responses", ag, err)
	case t.HTTP != nil:
		ag, err := httpagent.New(*t.HTTP, mopts)
		return remoteAgent(at, "target.agent.http", ag, err)
	}
	return nil, SpecError{at.Errorf("target.agent", "this target.agent kind is not supported by this build yet; use the built-in agent (target: {connector, model} with harness: {builtin: {}}) or target.agent.oracle")}
}

// remoteAgent turns a remote kind's constructor error into a spec error
// at field: the remote kinds (a2a, mcp, responses, http) only fail to build
// on bad settings.
func remoteAgent[A agent.Agent](at where, field string, ag A, err error) (agent.Agent, error) {
	if err != nil {
		return nil, SpecError{at.Errorf(field, "%v", err)}
	}
	return ag, nil
}

package telemetry

import (
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"

	"evals.si/spec"
)

// agentInfo is what a run's spec says about the agent under test, for its
// trials' invoke_agent spans (gen_ai.agent.name), the spans of the calls
// to a remote agent (server.address) and the tools' type.
type agentInfo struct {
	// name is gen_ai.agent.name: the remote agent's kind (a2a, mcp,
	// responses, http), cli and the command's program for a CLI agent,
	// evalsi.builtin or evalsi.external for a harness, and the model for a
	// plain run (the model is the agent).
	name string
	// kind is the target.agent kind; "" for a harness or a plain run.
	kind string
	// provider and model are the target model's, when it has one.
	provider, model string
	// server is the remote agent's URL.
	server string
}

// runsTools reports whether the agent itself runs the tools it reports
// (a remote or CLI agent): its tools are extensions in OTel's terms, not
// functions the harness runs.
func (a agentInfo) runsTools() bool { return a.kind != "" }

func agentOf(s *spec.Spec) agentInfo {
	if s == nil {
		return agentInfo{name: "evalsi.agent"}
	}
	a := agentInfo{provider: s.Target.Connector, model: s.Target.Model}
	if ag := s.Target.Agent; ag != nil {
		switch {
		case ag.A2A != nil:
			a.kind, a.server = "a2a", ag.A2A.URL
		case ag.MCP != nil:
			a.kind, a.server = "mcp", ag.MCP.URL
		case ag.Responses != nil:
			a.kind, a.server, a.provider, a.model = "responses", ag.Responses.BaseURL, "openai", ag.Responses.Model
		case ag.HTTP != nil:
			a.kind, a.server = "http", ag.HTTP.URL
		case ag.CLI != nil:
			a.kind = "cli"
		case ag.Oracle != nil:
			a.kind = "oracle"
		}
		a.name = a.kind
		if ag.CLI != nil {
			if p := ag.CLI.Program(); p != "" {
				a.name = "cli " + p
			}
		}
		return a
	}
	switch {
	case s.Harness != nil && s.Harness.External != nil:
		a.name = "evalsi.external"
	case s.Harness != nil || s.Environment != nil:
		a.name = "evalsi.builtin"
	default:
		a.name = s.Target.Model
	}
	if a.name == "" {
		a.name = "evalsi.agent"
	}
	return a
}

// serverAttrs are server.address and server.port of a remote agent.
func (a agentInfo) serverAttrs() []attribute.KeyValue {
	u, err := url.Parse(a.server)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	out := []attribute.KeyValue{attribute.String("server.address", u.Hostname())}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if p, err := strconv.Atoi(port); err == nil {
		out = append(out, attribute.Int("server.port", p))
	}
	return out
}

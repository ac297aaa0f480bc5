package access

import (
	"context"
	"errors"
	"slices"
	"testing"

	"evals.si/spec"
)

// TestRunResource proves resource.agent carries the effective kind,
// harness, image(s), network and isolation of a spec, and that a network or
// isolation a rule checks cannot be sidestepped through another phase
// (setup, checker, a CLI agent's hosts) or the ladder.
func TestRunResource(t *testing.T) {
	const base = "dataset: {records: [{id: r1, input: x}]}\n"
	tests := []struct {
		name string
		yaml string
		want *AgentInfo // nil: not an agent run
	}{
		{"model run", base + "target: {connector: openai, model: m}\n", nil},
		{"builtin, defaults", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"network allow", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {image: img:1, sandbox: {network: allow}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Image: "img:1", Images: []string{"img:1"}, Network: "allow", MinIsolation: "process"}},
		{"allowlist", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {sandbox: {network: allowlist, allow_hosts: ['b.org:443', 'a.org:443']}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "allowlist", AllowHosts: []string{"a.org:443", "b.org:443"}, MinIsolation: "process"}},
		{"a CLI agent's hosts make an allowlist", base + "target: {agent: {cli: {command: claude -p, allow_hosts: ['api.anthropic.com:443']}}}\n",
			&AgentInfo{Kind: "cli", Harness: "builtin", Images: []string{""}, Network: "allowlist", AllowHosts: []string{"api.anthropic.com:443"}, MinIsolation: "process"}},
		{"setup_network allow widens", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {setup_network: allow}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "allow", MinIsolation: "process"}},
		{"checker network allow widens", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {checker: {command: [true], network: allow}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "allow", MinIsolation: "process"}},
		{"external python", base + "target: {connector: openai, model: m}\nharness: {external: {python: 'evalsi_taubench:TauBenchHarness'}}\n",
			&AgentInfo{Kind: "external", Harness: "python:evalsi_taubench:TauBenchHarness", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"external command", base + "target: {connector: openai, model: m}\nharness: {external: {command: [./h, --x]}}\n",
			&AgentInfo{Kind: "external", Harness: "command:./h --x", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"external address", base + "target: {connector: openai, model: m}\nharness: {external: {address: '127.0.0.1:7000'}}\n",
			&AgentInfo{Kind: "external", Harness: "address:127.0.0.1:7000", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"a2a", base + "target: {agent: {a2a: {url: 'http://127.0.0.1:1'}}}\n",
			&AgentInfo{Kind: "a2a", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"responses", base + "target: {agent: {responses: {base_url: 'http://127.0.0.1:1', model: m}}}\n",
			&AgentInfo{Kind: "responses", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "process"}},
		{"declared min_isolation", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {sandbox: {min_isolation: vm}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "vm"}},
		{"ladder bounds isolation", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {sandbox: {ladder: [firecracker, docker]}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "container"}},
		{"host rung is none", base + "target: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {sandbox: {ladder: [bwrap, host], allow_unsafe_host: true}}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Images: []string{""}, Network: "deny", MinIsolation: "none"}},
		{"records' images", "dataset: {records: [{id: a, input: x, metadata: {environment: {image: 'other:2'}}}, {id: b, input: y, metadata: {environment: {image: null}}}, {id: c, input: z}]}\ntarget: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {image: img:1}\n",
			&AgentInfo{Kind: "builtin", Harness: "builtin", Image: "img:1", Images: []string{"img:1", "other:2", ""}, Network: "deny", MinIsolation: "process"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := RunResource("alpha", parseSpec(t, tt.yaml))
			if r.Kind != ResourceRun || r.Project != "alpha" || r.Name != "test" {
				t.Errorf("resource %+v: want a run of alpha named test", r)
			}
			if tt.want == nil {
				if r.RunsCode || r.Agent != nil {
					t.Errorf("a model run has runs_code %v, agent %+v", r.RunsCode, r.Agent)
				}
				return
			}
			if !r.RunsCode || r.Agent == nil {
				t.Fatalf("an agent run has runs_code %v, agent %v", r.RunsCode, r.Agent)
			}
			g, w := *r.Agent, *tt.want
			if g.Kind != w.Kind || g.Harness != w.Harness || g.Image != w.Image || !slices.Equal(g.Images, w.Images) ||
				g.Network != w.Network || !slices.Equal(g.AllowHosts, w.AllowHosts) || g.MinIsolation != w.MinIsolation {
				t.Errorf("agent\n got %+v\nwant %+v", g, w)
			}
		})
	}
}

// TestWithRecords proves images of records loaded later reach the rules.
func TestWithRecords(t *testing.T) {
	cfg := testConfig()
	cfg.Authorization.Rules = []string{`!resource.runs_code || resource.agent.images.all(i, i.startsWith("registry.example/"))`}
	a := newAccess(t, cfg)
	r := RunResource("alpha", parseSpec(t, "dataset: {path: tasks.jsonl}\ntarget: {connector: openai, model: m}\nharness: {builtin: {}}\nenvironment: {image: registry.example/base:1}\n"))
	ana := mustAuth(t, a, anaToken)
	if err := a.Authorize(context.Background(), ana, r, Request{Action: PermRunsCreate}); err != nil {
		t.Fatalf("the spec's own image: %v", err)
	}
	loaded := []spec.Record{{ID: "t1", Metadata: map[string]spec.JSON{"environment": spec.JSON(`{"image": "docker.io/evil:1"}`)}}}
	r2 := WithRecords(r, loaded)
	if err := a.Authorize(context.Background(), ana, r2, Request{Action: PermRunsCreate}); !errors.Is(err, ErrDenied) {
		t.Errorf("a record's image outside the registry: %v, want a denial", err)
	}
	if len(r.Agent.Images) != 1 {
		t.Errorf("WithRecords changed its argument: %v", r.Agent.Images)
	}
}

// TestReadsRuns proves a spec reading another run's records names it, so
// the server can authorize the read in the run's own project.
func TestReadsRuns(t *testing.T) {
	s := parseSpec(t, "dataset: {run: {run_id: run-123}}\ntarget: {connector: openai, model: m}\n")
	if got := ReadsRuns(s); !slices.Equal(got, []string{"run-123"}) {
		t.Errorf("ReadsRuns = %v, want [run-123]", got)
	}
	if got := ReadsRuns(parseSpec(t, modelRun)); got != nil {
		t.Errorf("ReadsRuns of inline records = %v", got)
	}
	if got := widest("deny", "Allow"); got != "allow" {
		t.Errorf("an unknown network counts as %q, want allow", got)
	}
}

// TestWorkerReach proves endpoints and paths the worker itself uses are
// found anywhere in the spec, and the sandbox's own paths are not.
func TestWorkerReach(t *testing.T) {
	s := parseSpec(t, `
dataset: {path: tasks.jsonl}
target: {connector: openai, model: m, base_url: 'http://169.254.169.254/v1'}
judge: {connector: openai, model: j, base_url: 'https://judge.example/v1'}
harness:
  builtin:
    tools: {mcp: [{name: a, url: 'http://127.0.0.1:9/mcp'}, {name: b, command: [x]}]}
    recording: {mode: record, dir: /etc/evil}
    user_simulator: {judge: {connector: scripted, model: s, script_file: /var/lib/secret.yaml}}
environment: {image: img, sandbox: {workdir: /work}, checker: {command: [true], patch_file: /tmp/p.diff}}
`)
	r := RunResource("alpha", s)
	wantE := []string{"http://127.0.0.1:9/mcp", "http://169.254.169.254/v1", "https://judge.example/v1"}
	wantP := []string{"/etc/evil", "/var/lib/secret.yaml", "tasks.jsonl"}
	if !slices.Equal(r.Endpoints, wantE) || !slices.Equal(r.Paths, wantP) {
		t.Errorf("endpoints %v paths %v\nwant %v %v", r.Endpoints, r.Paths, wantE, wantP)
	}
	cfg := testConfig()
	cfg.Authorization.Rules = []string{`resource.endpoints.all(u, !u.contains("169.254."))`}
	a := newAccess(t, cfg)
	if err := a.Authorize(context.Background(), mustAuth(t, a, anaToken), r, Request{Action: PermRunsCreate}); !errors.Is(err, ErrDenied) {
		t.Errorf("a rule on endpoints: %v, want a denial", err)
	}
}

package planner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/dataset"
	"evals.si/engine"
	"evals.si/sandbox"
	"evals.si/sandbox/host"
	"evals.si/spec"
)

// testHost plans on the host rung (a spec opts into it with
// allow_unsafe_host): planning creates no sandbox.
func testHost(t *testing.T) *Host {
	t.Helper()
	return &Host{
		Rungs:    []sandbox.Rung{host.New()},
		ProxyDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Getenv:   func(string) string { return "" },
	}
}

// parseSpec writes y as spec.yaml in a fresh directory and loads it.
func parseSpec(t *testing.T, y string) *spec.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := spec.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

const agentTail = `
harness: {builtin: {}}
environment: {sandbox: {ladder: [host], allow_unsafe_host: true}}
`

// Plan builds every kind of run without its dataset: the records are a
// worker's, one with each lease. The dataset here does not even exist.
func TestPlanDoesNotLoadTheDataset(t *testing.T) {
	h := testHost(t)
	for _, tc := range []struct {
		name, yaml string
		agentRun   bool
	}{
		{"plain", `
dataset: {path: missing.jsonl}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
trials: 3
`, false},
		{"builtin", `
dataset: {path: missing.jsonl}
target: {connector: scripted, model: m, script: {default: [{content: done}]}}
concurrency: 5
retries: 0
` + agentTail, true},
		{"oracle", `
dataset: {path: missing.jsonl}
target: {agent: {oracle: {}}}
environment: {sandbox: {ladder: [host], allow_unsafe_host: true}}
`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parseSpec(t, tc.yaml)
			p, err := h.Plan(t.Context(), f)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Records != nil {
				t.Errorf("Records = %v, want nil", p.Records)
			}
			if want := engine.LimitsOf(f.Spec); !reflect.DeepEqual(p.Limits, want) {
				t.Errorf("Limits = %+v, want %+v", p.Limits, want)
			}
			if p.Name != "spec" || p.SpecPath != f.Path {
				t.Errorf("name %q path %q", p.Name, p.SpecPath)
			}
			ar, isAgent := p.Runner.(*engine.AgentRunner)
			if isAgent != tc.agentRun {
				t.Fatalf("runner %T", p.Runner)
			}
			if isAgent && (ar.Envs != h.Envs || ar.ProxyDir != h.ProxyDir || ar.Caps != f.Spec.Caps || ar.Environment != f.Spec.Environment) {
				t.Errorf("agent runner not wired from the host and the spec: %+v", ar)
			}
			if _, err := h.Records(t.Context(), f); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
				t.Errorf("Records err = %v, want the missing dataset", err)
			}
		})
	}
}

// The evaluators in effect are the defaults when the spec names none, and
// the plan's runner grades with exactly those.
func TestPlanEvaluators(t *testing.T) {
	h := testHost(t)
	for _, tc := range []struct {
		yaml       string
		want, pass string
	}{
		{`
dataset: {records: [{id: a, input: x}]}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
`, "exact-match", "exact-match"},
		{`
dataset: {records: [{id: a, input: x}]}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
` + agentTail, "task-success,policy-violations,agent-efficiency", "task-success"},
	} {
		p, err := h.Plan(t.Context(), parseSpec(t, tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range p.Evaluators {
			names = append(names, e.Name)
		}
		if got := strings.Join(names, ","); got != tc.want || p.Pass != tc.pass {
			t.Errorf("evaluators %s pass %q, want %s pass %q", got, p.Pass, tc.want, tc.pass)
		}
		p.Close()
	}
}

// A problem found while planning is a SpecError at the field's position in
// the spec file, as the CLI prints it (exit 2).
func TestPlanErrorsArePositioned(t *testing.T) {
	h := testHost(t)
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"checker parser", `
dataset: {records: [{id: a, input: x}]}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
harness: {builtin: {}}
environment:
  sandbox: {ladder: [host], allow_unsafe_host: true}
  checker: {command: ["true"], parser: "nope:parse"}
`, `spec.yaml:7:40: checker parser "nope:parse" is not registered`},
		{"tools with an own agent", `
dataset: {records: [{id: a, input: x}]}
target: {agent: {oracle: {}}}
harness: {builtin: {tools: {mocks: [{name: t, description: d, response: r}]}}}
environment: {sandbox: {ladder: [host], allow_unsafe_host: true}}
`, `spec.yaml:4:21: harness.builtin.tools applies only to the built-in agent`},
		{"recording with an own agent", `
dataset: {records: [{id: a, input: x}]}
target: {agent: {oracle: {}}}
harness: {builtin: {recording: {mode: record, dir: rec}}}
environment: {sandbox: {ladder: [host], allow_unsafe_host: true}}
`, `spec.yaml:4:21: recording records the built-in agent`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Plan(t.Context(), parseSpec(t, tc.yaml))
			var se SpecError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a SpecError containing %q", err, tc.want)
			}
		})
	}
}

// Records refuses an empty dataset at the dataset field.
func TestRecordsRefusesAnEmptyDataset(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := parseSpec(t, `
dataset: {path: `+filepath.Join(dir, "empty.jsonl")+`}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
`)
	_, err := testHost(t).Records(context.Background(), f)
	var se SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "spec.yaml:2:") || !strings.Contains(err.Error(), "the dataset has no records") {
		t.Errorf("err = %v", err)
	}
}

// Records a benchmark importer made ask for the task's own network (Harbor
// and SWE-bench default to allow): under a spec that leaves the network at
// deny they run with deny, not refused; the same request in a plain
// dataset is refused.
func TestImportedTasksRunUnderTheSpecsNetwork(t *testing.T) {
	asks := map[string]any{"environment": map[string]any{"setup_network": "allow", "sandbox": map[string]any{"network": "allow", "workdir": "/app"}}}
	b, err := json.Marshal([]map[string]any{{"id": "task", "input": "x", "metadata": asks}})
	if err != nil {
		t.Fatal(err)
	}
	f := parseSpec(t, `
dataset: {records: `+string(b)+`}
target: {connector: scripted, model: m, script: {default: [{content: x}]}}
`+agentTail)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		uri     string
		refused bool
	}{{"harbor://tasks", false}, {"swebench://i.jsonl", false}, {"", true}} {
		out, err := recordPolicies(f, f.Spec.Environment, tc.uri, f.Spec.Dataset.Records, log)
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "sandbox.network") {
				t.Errorf("%q: err = %v, want sandbox.network refused", tc.uri, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.uri, err)
		}
		env, err := dataset.Environment(f.Spec.Environment, out[0])
		if err != nil {
			t.Fatalf("%q: %v", tc.uri, err)
		}
		if env.Sandbox.Network != "deny" || env.SetupNetwork != "deny" || env.Sandbox.Workdir != "/app" {
			t.Errorf("%q: network %q setup %q workdir %q", tc.uri, env.Sandbox.Network, env.SetupNetwork, env.Sandbox.Workdir)
		}
	}
}

package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/engine"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/trajectory"
)

// requireAgentSandbox skips (fails under EVALSI_STRICT=1) when the bwrap
// rung cannot run agent trials here.
func requireAgentSandbox(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "agent runs need a sandbox rung; bubblewrap is not installed")
	}
}

func loadSpec(t *testing.T, path string) *spec.File {
	t.Helper()
	f, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

func writeSpec(t *testing.T, y string) *spec.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadSpec(t, p)
}

// trialResults returns every tool result of a run, by "record/trial".
func trialResults(t *testing.T, a *App, runID string) (map[string][]trajectory.ToolResult, map[string]bool) {
	t.Helper()
	ctx := context.Background()
	trials, err := a.Store().ListTrials(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]trajectory.ToolResult{}
	passed := map[string]bool{}
	for _, tr := range trials {
		key := fmt.Sprintf("%s/%d", tr.RecordID, tr.Trial)
		evs, err := a.Store().Events(ctx, tr.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == trajectory.KindToolResult {
				out[key] = append(out[key], *e.ToolResult)
			}
		}
		passed[key] = tr.Passed != nil && *tr.Passed
	}
	return out, passed
}

// The example's faults are the same in every run of the spec, and they are
// what decides which trials fail.
func TestToolsExampleFaultsRepeat(t *testing.T) {
	requireAgentSandbox(t)
	f := loadSpec(t, "../examples/agents/tools-offline.yaml")
	var marks []string
	for range 2 {
		a := openApp(t)
		sum, err := a.Run(context.Background(), f, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Status != engine.StatusCompleted || sum.Errored != 0 {
			t.Fatalf("run %s: status %s, %d errored", sum.RunID, sum.Status, sum.Errored)
		}
		results, passed := trialResults(t, a, sum.RunID)
		var b strings.Builder
		faults := 0
		for trial := range 4 {
			key := fmt.Sprintf("paris-forecast/%d", trial)
			rs := results[key]
			if len(rs) != 3 {
				t.Fatalf("%s: %d tool results, want 3", key, len(rs))
			}
			fmt.Fprintf(&b, "%s:", key)
			for _, r := range rs {
				fmt.Fprintf(&b, " %s=%s", r.Name, r.Fault)
				if r.Fault != "" {
					faults++
				}
				switch {
				case r.Name == "weather" && r.Fault == "":
					if r.Output != "Paris: 18C, light rain" {
						t.Errorf("%s: weather said %q", key, r.Output)
					}
				case r.Name == "weather":
					if r.Fault != "malformed" || r.Output != `{"output":"Paris: 18C,` {
						t.Errorf("%s: malformed weather result %+v", key, r)
					}
				case r.Name == "write_file" && r.Fault != "":
					if r.Fault != "error" || !r.IsError {
						t.Errorf("%s: faulted write_file %+v", key, r)
					}
					if passed[key] {
						t.Errorf("%s passed although write_file never ran", key)
					}
				case r.Name == "write_file":
					if !passed[key] {
						t.Errorf("%s failed although write_file ran", key)
					}
				case r.Fault != "":
					t.Errorf("%s: %s has a fault no rule asks for: %+v", key, r.Name, r)
				}
			}
			b.WriteString("\n")
		}
		if faults == 0 || faults == 8 {
			t.Errorf("%d faults in 8 faultable calls at rate 0.5: the example shows nothing\n%s", faults, b.String())
		}
		marks = append(marks, b.String())
	}
	if marks[0] != marks[1] {
		t.Errorf("the same spec injected different faults:\n%s\nvs\n%s", marks[0], marks[1])
	}
}

// A scripted run calls a tool of server-everything over stdio and a mock
// tool; each trial gets its own server process.
func TestBuiltinMCPAndMockTools(t *testing.T) {
	requireAgentSandbox(t)
	dir := testenv.NodeModules(t, "@modelcontextprotocol/server-everything")
	if _, err := os.Stat("/usr/bin/node"); err != nil {
		testenv.Missing(t, "node", "/usr/bin/node runs the MCP test server")
	}
	entry := filepath.Join(dir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	f := writeSpec(t, `name: mcp-and-mocks
trials: 2
dataset:
  records:
    - {id: r1, input: "Echo hello, toggle logging, ask the oracle."}
target:
  connector: scripted
  model: m
  script:
    default:
      - tool_calls:
          - {name: ev__echo, arguments: {message: hello}}
          - {name: ev__toggle-simulated-logging, arguments: {}}
          - {name: oracle, arguments: {q: life}}
          - {name: oracle, arguments: {q: other}}
      - content: done
harness:
  builtin:
    tools:
      mcp:
        - name: ev
          command: [/usr/bin/node, `+entry+`, stdio]
      mocks:
        - name: oracle
          responses:
            - {arguments: {q: life}, response: 42}
environment:
  sandbox: {network: deny}
evaluators: [agent-efficiency]
`)
	a := openApp(t)
	sum, err := a.Run(context.Background(), f, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != engine.StatusCompleted || sum.Errored != 0 {
		t.Fatalf("status %s, %d errored: %v", sum.Status, sum.Errored, sum.ErrorsByKind)
	}
	results, _ := trialResults(t, a, sum.RunID)
	for _, key := range []string{"r1/0", "r1/1"} {
		rs := results[key]
		if len(rs) != 4 {
			t.Fatalf("%s: %d tool results, want 4: %+v", key, len(rs), rs)
		}
		if rs[0].Output != "Echo: hello" || rs[0].IsError {
			t.Errorf("%s: echo %+v", key, rs[0])
		}
		// A fresh server per trial: logging starts in both.
		if !strings.HasPrefix(rs[1].Output, "Started") {
			t.Errorf("%s: toggle %+v (a trial saw another's server state)", key, rs[1])
		}
		if rs[2].Output != "42" || rs[2].IsError {
			t.Errorf("%s: oracle %+v", key, rs[2])
		}
		if !rs[3].IsError || !strings.Contains(rs[3].Output, `{"q":"life"}`) {
			t.Errorf("%s: unmatched oracle call %+v", key, rs[3])
		}
		for _, r := range rs {
			if r.Fault != "" {
				t.Errorf("%s: fault %q without fault rules", key, r.Fault)
			}
		}
	}
}

func TestBuiltinToolsStartErrors(t *testing.T) {
	requireAgentSandbox(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	base := "name: bad-tools\ndataset:\n  records: [{id: r, input: x}]\ntarget: {connector: scripted, model: m, script: {default: [{content: ok}]}}\nenvironment: {sandbox: {network: deny}}\nharness:\n  builtin:\n    tools:\n"
	for _, tc := range []struct {
		name     string
		tools    string
		specErr  bool
		contains []string
	}{
		{"mock clashes with bash", "      mocks: [{name: bash, response: x}]\n", true, []string{"harness.builtin.tools", `"bash"`, "mocks[0]"}},
		{"fault names no tool", "      mocks: [{name: m1, response: x}]\n      faults: [{tool: m2, kind: error, rate: 1}]\n", true, []string{"faults[0].tool", `"m2"`}},
		{"server down", "      mcp: [{name: down, url: http://" + closed + "/mcp}]\n", false, []string{"harness.builtin.tools.mcp[0]", `"down"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := writeSpec(t, base+tc.tools)
			_, err := openApp(t).Run(context.Background(), f, RunOptions{})
			if err == nil {
				t.Fatal("the run started")
			}
			var se SpecError
			if errors.As(err, &se) != tc.specErr {
				t.Errorf("SpecError = %v, want %v: %v", !tc.specErr, tc.specErr, err)
			}
			for _, w := range tc.contains {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Tools belong to the built-in agent; another agent kind must not look as if
// it ran with them.
func TestBuiltinToolsRefusedForOtherAgents(t *testing.T) {
	requireAgentSandbox(t)
	f := writeSpec(t, "name: tools-other-agent\ndataset:\n  records: [{id: r, input: x}]\n"+
		"target: {agent: {cli: {command: 'echo hi'}}}\nenvironment: {sandbox: {network: deny}}\n"+
		"harness:\n  builtin:\n    tools:\n      mocks: [{name: m1, response: x}]\n")
	_, err := openApp(t).Run(context.Background(), f, RunOptions{})
	var se SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "applies only to the built-in agent") {
		t.Fatalf("err = %v, want a spec error refusing tools for target.agent", err)
	}
}

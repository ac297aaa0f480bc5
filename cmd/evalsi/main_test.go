package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/pgtest"
	"evals.si/sandbox/reexec"
	"evals.si/store"
	"evals.si/trajectory"
)

func TestMain(m *testing.M) {
	reexec.Init()
	pgtest.Main(m)
}

type result struct {
	code   int
	stdout string
	stderr string
	json   struct {
		RunID   string             `json:"run_id"`
		Status  string             `json:"status"`
		Records int                `json:"records"`
		Trials  int                `json:"trials"`
		Errored int                `json:"errored"`
		Scores  map[string]float64 `json:"scores"`
	}
}

// evalsi runs the CLI in process against the test's own store.
func evalsi(t *testing.T, storePath string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{}, args...)
	if len(args) > 0 && (args[0] == "run" || args[0] == "runs") {
		full = append(full[:1:1], append([]string{}, args[1:]...)...)
		if args[0] == "runs" && len(args) > 1 {
			full = append([]string{"runs", args[1], "--store", storePath}, args[2:]...)
		} else {
			full = append([]string{"run", "--store", storePath}, args[1:]...)
		}
	}
	r := result{code: run(context.Background(), full, &out, &errb), stdout: out.String(), stderr: errb.String()}
	if strings.Contains(strings.Join(args, " "), "--json") && args[0] == "run" && r.code != exitUsage {
		if err := json.Unmarshal(out.Bytes(), &r.json); err != nil {
			t.Fatalf("evalsi %v: stdout is not one JSON object: %v\n%s\nstderr:\n%s", args, err, out.String(), errb.String())
		}
	}
	return r
}

func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bubblewrap is not installed")
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git is not installed")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
	}
}

func TestExamplesOffline(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	cases := []struct {
		file string
		want map[string]float64
	}{
		{"../../examples/capitals-offline.yaml", map[string]float64{"exact-match": 0.5, "includes": 0.75}},
		{"../../examples/trials-offline.yaml", map[string]float64{"exact-match": 6.0 / 9, "pass@1": 6.0 / 9, "pass@3": 1, "pass^3": 1.0 / 3}},
		{"../../examples/agents/fix-calc-offline.yaml", map[string]float64{"task-success": 1, "mergeable": 1, "policy-clean": 1, "within-budget": 1, "agent-steps": 4}},
		{"../../examples/agents/fix-calc-wrong-offline.yaml", map[string]float64{"task-success": 0, "mergeable": 0, "policy-clean": 1}},
		// External harnesses over the harness protocol: Go (go run) and Python.
		{"../../examples/agents/fix-calc-external-go.yaml", map[string]float64{"task-success": 1, "mergeable": 1, "policy-clean": 1, "agent-steps": 4}},
		{"../../examples/agents/fix-calc-external-python.yaml", map[string]float64{"task-success": 1, "mergeable": 1, "policy-clean": 1, "agent-steps": 4}},
		{"../../examples/agents/cli-offline.yaml", map[string]float64{"task-success": 1, "policy-clean": 1, "agent-steps": 4, "agent-cost-usd": 0.0321}},
		// τ-bench's oracle over the telecom samples (no sandbox, no model).
		{"../../examples/agents/taubench-offline.yaml", map[string]float64{"task-success": 1}},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			r := evalsi(t, db, "run", "-f", c.file, "--json")
			if r.code != 0 || r.json.Status != "completed" || r.json.Errored != 0 {
				t.Fatalf("exit %d, status %q, errored %d\nstdout: %s\nstderr: %s", r.code, r.json.Status, r.json.Errored, r.stdout, r.stderr)
			}
			for name, want := range c.want {
				got, ok := r.json.Scores[name]
				if !ok || abs(got-want) > 1e-9 {
					t.Errorf("score %s = %v (present %v), want %v; all: %v", name, got, ok, want, r.json.Scores)
				}
			}
		})
	}
	// The table report carries the same run, and runs list/show find it.
	r := evalsi(t, db, "run", "-f", "../../examples/trials-offline.yaml")
	for _, want := range []string{"pass@3", "pass^2", "exact-match", "spend:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary table lacks %q:\n%s", want, r.stdout)
		}
	}
	if l := evalsi(t, db, "runs", "list"); l.code != 0 || !strings.Contains(l.stdout, "fix-calc-offline") {
		t.Errorf("runs list: exit %d\n%s%s", l.code, l.stdout, l.stderr)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// fixCalcOn writes fix-calc-offline with the ladder pinned to one rung.
func fixCalcOn(t *testing.T, rung string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/agents/fix-calc-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "    network: deny\n", "    network: deny\n    ladder: ["+rung+"]\n", 1)
	p := filepath.Join(t.TempDir(), "fix-calc-"+rung+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFixCalcIdenticalOnEveryRung(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	var first map[string]float64
	for _, rung := range []string{"bwrap", "landlock", "docker"} {
		t.Run(rung, func(t *testing.T) {
			if rung == "docker" {
				if err := exec.Command("docker", "info").Run(); err != nil {
					testenv.Missing(t, "docker", "no Docker daemon answers (bash .ci/setup starts one)")
				}
			}
			r := evalsi(t, db, "run", "-f", fixCalcOn(t, rung), "--json")
			if r.code != 0 || r.json.Errored != 0 {
				t.Fatalf("exit %d errored %d\n%s\n%s", r.code, r.json.Errored, r.stdout, r.stderr)
			}
			if r.json.Scores["task-success"] != 1 {
				t.Errorf("task-success = %v", r.json.Scores["task-success"])
			}
			if first == nil {
				first = r.json.Scores
				return
			}
			for k, v := range first {
				if r.json.Scores[k] != v {
					t.Errorf("%s: %s = %v, bwrap gave %v", rung, k, r.json.Scores[k], v)
				}
			}
		})
	}
}

func TestTrajectoryStoredStepByStep(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r := evalsi(t, db, "run", "-f", "../../examples/agents/fix-calc-offline.yaml", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(context.Background(), r.json.RunID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials: %v %v", trials, err)
	}
	events, err := st.Events(context.Background(), trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	count := map[trajectory.Kind]int{}
	var tools []string
	for i, e := range events {
		if e.Seq != i+1 {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		count[e.Kind]++
		if e.Kind == trajectory.KindToolCall {
			tools = append(tools, e.ToolCall.Name)
		}
	}
	if got := strings.Join(tools, ","); got != "bash,write_file,bash" {
		t.Errorf("tool calls = %s", got)
	}
	if count[trajectory.KindModelCall] != 4 || count[trajectory.KindToolResult] != 3 || count[trajectory.KindChecker] != 1 || count[trajectory.KindStop] != 1 {
		t.Errorf("event counts = %v", count)
	}
	if trials[0].Isolation == nil || !strings.Contains(string(trials[0].Isolation), `"rung"`) {
		t.Errorf("no isolation report: %s", trials[0].Isolation)
	}
}

func TestSpecErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: x\ndataset:\n  records:\n    - {id: a, input: hi, expected: hi}\ntarget: {connector: scripted, model: m, script: {default: [{content: hi}]}}\nenvironment:\n  setup_netwrk: allow\n"), 0o644)
	r := evalsi(t, filepath.Join(dir, "db"), "run", "-f", bad)
	if r.code != exitUsage {
		t.Fatalf("exit %d, want 2; stderr: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "bad.yaml:7:3") || !strings.Contains(r.stderr, `did you mean "setup_network"`) {
		t.Errorf("stderr lacks position or suggestion:\n%s", r.stderr)
	}
	if r := evalsi(t, filepath.Join(dir, "db"), "run"); r.code != exitUsage {
		t.Errorf("run without -f: exit %d", r.code)
	}
	if r := evalsi(t, filepath.Join(dir, "db"), "frobnicate"); r.code != exitUsage {
		t.Errorf("unknown command: exit %d", r.code)
	}
}

func TestFailUnder(t *testing.T) {
	db := filepath.Join(t.TempDir(), "db")
	f := "../../examples/capitals-offline.yaml"
	if r := evalsi(t, db, "run", "-f", f, "--json", "--fail-under", "includes=0.7"); r.code != 0 {
		t.Errorf("includes 0.75 >= 0.7: exit %d %s", r.code, r.stderr)
	}
	if r := evalsi(t, db, "run", "-f", f, "--json", "--fail-under", "includes=0.7", "--fail-under", "exact-match=0.9"); r.code != exitFailUnder {
		t.Errorf("exact-match 0.5 < 0.9: exit %d", r.code)
	}
	if r := evalsi(t, db, "run", "-f", f, "--fail-under", "nope=1"); r.code != exitUsage {
		t.Errorf("unknown score: exit %d", r.code)
	}
}

// agentSpec builds a small agent spec around a scripted model.
func agentSpec(t *testing.T, script, checker, extra string) string {
	t.Helper()
	s := `name: t
dataset:
  records:
    - {id: r1, input: "do the task"}
target:
  connector: scripted
  model: scripted-agent
  script:
    default:
` + script + `
harness:
  builtin:
    max_steps: 5
` + extra + `
environment:
  files: {hello.txt: "hi\n"}
  checker:
` + checker + `
evaluators: [task-success, policy-violations]
`
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckerThatCannotRunIsAnError(t *testing.T) {
	requireBwrap(t)
	db := filepath.Join(t.TempDir(), "db")
	p := agentSpec(t, "      - content: done", "    command: [no-such-interpreter, check.py]", "")
	r := evalsi(t, db, "run", "-f", p, "--json")
	if r.code != exitErrored || r.json.Errored != 1 {
		t.Fatalf("exit %d errored %d, want exit 3 and 1 errored\n%s\n%s", r.code, r.json.Errored, r.stdout, r.stderr)
	}
	if _, scored := r.json.Scores["task-success"]; scored {
		t.Errorf("an unrunnable checker was scored: %v", r.json.Scores)
	}
	// The same task with a checker that runs and fails is a 0, not an error.
	p = agentSpec(t, "      - content: done", "    command: [sh, -c, 'exit 1']", "")
	r = evalsi(t, db, "run", "-f", p, "--json")
	if r.code != 0 || r.json.Errored != 0 || r.json.Scores["task-success"] != 0 {
		t.Fatalf("failing checker: exit %d errored %d scores %v\n%s", r.code, r.json.Errored, r.json.Scores, r.stderr)
	}
}

func TestEscalationDeniedAndGranted(t *testing.T) {
	requireBwrap(t)
	script := `      - tool_calls:
          - name: request_escalation
            arguments: {kind: network, reason: "need to download a package"}
      - content: done`
	for _, c := range []struct {
		name, extra string
		granted     bool
	}{
		{"denied", "", false},
		{"granted", "    escalation: {allow: [network]}", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "db")
			p := agentSpec(t, script, "    command: [test, -f, hello.txt]", c.extra)
			r := evalsi(t, db, "run", "-f", p, "--json")
			if r.code != 0 || r.json.Scores["escalation-requests"] != 1 {
				t.Fatalf("exit %d scores %v\n%s", r.code, r.json.Scores, r.stderr)
			}
			st, err := store.Open(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			trials, _ := st.ListTrials(context.Background(), r.json.RunID)
			events, _ := st.Events(context.Background(), trials[0].ID, 0, 0)
			var esc *trajectory.Escalation
			var result string
			for _, e := range events {
				if e.Escalation != nil {
					esc = e.Escalation
				}
				if e.ToolResult != nil && e.ToolResult.Name == "request_escalation" {
					result = e.ToolResult.Output
				}
			}
			if esc == nil || esc.Granted != c.granted || esc.Kind != "network" {
				t.Fatalf("escalation event = %+v, want granted=%v", esc, c.granted)
			}
			if !strings.Contains(strings.ToLower(result), map[bool]string{true: "grant", false: "den"}[c.granted]) {
				t.Errorf("the model was told %q", result)
			}
		})
	}
}

func TestSchemaPrints(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"schema"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v["properties"] == nil && v["$defs"] == nil {
		t.Fatalf("not a JSON Schema: %v\n%.300s", err, out.String())
	}
}

package swebench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/agent/oracle"
	"evals.si/bench/swebench"
	"evals.si/checker"
	"evals.si/engine"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const goldPatch = `diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b
 
 
 def sub(a, b):
`

const testPatch = `diff --git a/test_calc.py b/test_calc.py
--- a/test_calc.py
+++ b/test_calc.py
@@ -3,3 +3,7 @@ from calc import add, sub
 
 def test_sub():
     assert sub(3, 1) == 2
+
+
+def test_add():
+    assert add(1, 2) == 3
`

// repoSetup makes the instance's repository at /testbed, as an instance
// image has it: add() is broken, the test of it comes with the test patch.
const repoSetup = `set -e
mkdir -p /testbed && cd /testbed
printf 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n' > calc.py
printf 'from calc import add, sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n' > test_calc.py
git init -q
git add calc.py test_calc.py
git -c user.email=a@b -c user.name=a commit -qm base`

// instance is a v5 instance whose eval script runs the image's pytest.
func instance(id string, f2p, p2p []string) map[string]any {
	script := strings.Join([]string{
		"#!/bin/bash",
		"set -uxo pipefail",
		"cd /testbed",
		"git checkout HEAD -- test_calc.py",
		"git apply -v - <<'EOF_114329324912'\n" + testPatch + "\nEOF_114329324912",
		": '>>>>> Start Test Output'",
		"python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider test_calc.py",
		": '>>>>> End Test Output'",
		"git checkout HEAD -- test_calc.py",
	}, "\n")
	return map[string]any{
		"repo": "acme/calc", "instance_id": id, "base_commit": "HEAD",
		"patch": goldPatch, "test_patch": testPatch, "problem_statement": "add() subtracts",
		"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
		"image": "unused", "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail", "eval_script": script,
	}
}

// harness runs SWE-bench records through the engine's agent trial
// (engine.AgentRunner: agent sandbox, diff capture, the fresh checker
// sandbox) on bwrap with the local Debian image.
type harness struct {
	envs    *environment.Manager
	records map[string]spec.Record
}

func newHarness(t *testing.T, instances ...map[string]any) *harness {
	t.Helper()
	ref := benchimage.Ref(t, "../..")
	rung := bwraptest.Rung(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	imgs, err := image.Open(t.TempDir(), logger)
	if err != nil {
		t.Fatal(err)
	}
	envs := environment.NewManager(imgs, []sandbox.Rung{rung}, t.TempDir(), logger)
	t.Cleanup(func() { envs.Close() })

	dir := t.TempDir()
	var lines []byte
	for _, in := range instances {
		b, _ := json.Marshal(in)
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "i.jsonl"), lines, 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("swebench://i.jsonl?oracle=true&network=deny&image=" + url.QueryEscape(ref))
	res, err := swebench.Importer{}.Import(context.Background(), u, dir)
	if err != nil || len(res.Records) != len(instances) {
		t.Fatalf("import: %v %+v", err, res)
	}
	h := &harness{envs: envs, records: map[string]spec.Record{}}
	for _, rec := range res.Records {
		// The local image has no /testbed: setup makes it.
		var env spec.Environment
		if err := json.Unmarshal(rec.Metadata["environment"], &env); err != nil {
			t.Fatal(err)
		}
		if c := env.Checker; c == nil || !c.Fresh || c.PatchFile == "" || len(c.ParserArgs) == 0 {
			t.Fatalf("record %s: checker %+v: want fresh, a patch file and parser_args", rec.ID, c)
		}
		env.Setup = append(env.Setup, spec.Steps(repoSetup)...)
		b, err := json.Marshal(&env)
		if err != nil {
			t.Fatal(err)
		}
		rec.Metadata["environment"] = b
		h.records[rec.ID] = rec
	}
	return h
}

// run runs one trial of record id with ag and returns the checker's verdict.
func (h *harness) run(t *testing.T, id string, ag agent.Agent) *trajectory.Checker {
	t.Helper()
	return h.runRecord(t, h.records[id], ag)
}

// variant is record id with its checker changed.
func (h *harness) variant(t *testing.T, id string, change func(*spec.Checker)) spec.Record {
	t.Helper()
	rec := h.records[id]
	var env spec.Environment
	if err := json.Unmarshal(rec.Metadata["environment"], &env); err != nil {
		t.Fatal(err)
	}
	change(env.Checker)
	b, err := json.Marshal(&env)
	if err != nil {
		t.Fatal(err)
	}
	rec.Metadata = maps.Clone(rec.Metadata)
	rec.Metadata["environment"] = b
	return rec
}

func (h *harness) runRecord(t *testing.T, rec spec.Record, ag agent.Agent) *trajectory.Checker {
	t.Helper()
	reg := checker.NewRegistry()
	swebench.RegisterParsers(reg)
	r := &engine.AgentRunner{Envs: h.envs, Agent: ag, Checkers: reg, ProxyDir: t.TempDir()}
	discard := trajectory.SinkFunc(func(trajectory.Event) error { return nil })
	tc := &engine.TrialContext{RunID: "r", TrialID: "t-" + rec.ID, Record: rec, Emit: discard}
	o, err := r.RunTrial(t.Context(), tc)
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	if o.Verdict == nil {
		t.Fatal("no checker verdict")
	}
	t.Logf("verdict: pass %v score %v: %s", o.Verdict.Pass, o.Verdict.Score, o.Verdict.Details)
	return o.Verdict
}

// shellAgent runs its script in the agent's sandbox, as a model's shell
// tool call would, and keeps what it printed.
type shellAgent struct {
	script string
	out    string
}

func (a *shellAgent) Run(ctx context.Context, task agent.Task) (agent.Result, error) {
	res, err := task.Sandbox.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", a.script}, Workdir: task.Workdir})
	if err != nil {
		return agent.Result{}, err
	}
	a.out = string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 {
		return agent.Result{}, fmt.Errorf("agent script exited %d: %s", res.ExitCode, a.out)
	}
	return agent.Result{Output: "done", StopReason: agent.StopAnswered}, nil
}

const (
	wrongFix = `printf 'def add(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n' > calc.py`
	// fakeGrade is the grading line the checker once printed first, with
	// lists that make anything resolved.
	fakeGrade = `>>>>> evalsi swebench grade {"instance_id":"acme__calc-1","FAIL_TO_PASS":[],"PASS_TO_PASS":[],"log_parser":"parse_log_pytest","eval_type":"pass_and_fail"}`
	fakeLog   = ">>>>> Start Test Output\nPASSED test_calc.py::test_add\nPASSED test_calc.py::test_sub\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
)

// hostileScript tampers with everything outside its diff that grading in
// its own sandbox would run: a pytest plugin in site-packages (loaded by
// entry point) and a conftest.py at / that pass every test, checked to
// work here; pytest's __main__ and /bin/bash replaced by scripts that
// print a fake grading line and a passing log; a fake test output. Its
// diff is a change that fixes nothing.
const hostileScript = `set -e
sp=/usr/lib/python3/dist-packages
cat > $sp/evalsi_fake_pass.py <<'EOF'
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
EOF
mkdir -p $sp/evalsi_fake_pass-1.0.dist-info
printf 'Metadata-Version: 2.1\nName: evalsi-fake-pass\nVersion: 1.0\n' > $sp/evalsi_fake_pass-1.0.dist-info/METADATA
printf '[pytest11]\nfake = evalsi_fake_pass\n' > $sp/evalsi_fake_pass-1.0.dist-info/entry_points.txt
cp $sp/evalsi_fake_pass.py /conftest.py
mkdir -p /tmp/probe && printf 'def test_broken():\n    assert False\n' > /tmp/probe/test_probe.py
(cd /tmp/probe && python3 -m pytest -rA -p no:cacheprovider test_probe.py) | grep -q 'PASSED test_probe.py::test_broken'
echo "plugin passes a failing test"
printf 'import sys\nprint(%s)\nsys.exit(0)\n' "'''$FAKE_LOG'''" > $sp/pytest/__main__.py
cat > /tmp/fakebash <<EOF
#!/bin/sh
cat <<'LOG'
$FAKE_GRADE
$FAKE_LOG
LOG
cat > /tmp/evalsi-test-output.txt <<'LOG'
$FAKE_LOG
LOG
exit 0
EOF
cat /tmp/fakebash > /bin/bash
printf '%s' "$FAKE_LOG" > /tmp/evalsi-test-output.txt
/bin/bash -c true | grep -q 'evalsi swebench grade' && echo "bash replaced"
printf '\n# reviewed\n' >> calc.py
`

func TestGradedInAFreshSandbox(t *testing.T) {
	const id = "acme__calc-1"
	h := newHarness(t,
		instance(id, []string{"test_calc.py::test_add"}, []string{"test_calc.py::test_sub"}),
		instance("acme__calc-2", []string{}, []string{}),
	)

	t.Run("the gold patch through the oracle resolves", func(t *testing.T) {
		v := h.run(t, id, oracle.New())
		if !v.Pass || v.Score != 1 || !strings.Contains(v.Details, "FAIL_TO_PASS 1/1, PASS_TO_PASS 1/1") {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("a wrong fix is unresolved", func(t *testing.T) {
		v := h.run(t, id, &shellAgent{script: wrongFix})
		if v.Pass || !strings.Contains(v.Details, "FAIL_TO_PASS 0/1") {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("no change is not evaluated, as the harness skips an empty patch", func(t *testing.T) {
		v := h.run(t, id, &shellAgent{script: "true"})
		if v.Pass || v.Score != 0 || !strings.Contains(v.Details, "patch is empty") {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("a diff that does not apply is unresolved", func(t *testing.T) {
		// With the repository gone, the captured diff is a note, which no
		// command of the harness applies.
		v := h.run(t, id, &shellAgent{script: "printf 'x\\n' >> calc.py && rm -rf .git"})
		if v.Pass || !strings.Contains(v.Details, swebench.ApplyPatchFail) {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("tampering outside the diff does not reach the grade", func(t *testing.T) {
		ag := &shellAgent{script: "export FAKE_LOG='" + fakeLog + "' FAKE_GRADE='" + fakeGrade + "'\n" + hostileScript}
		v := h.run(t, id, ag)
		// The attack worked where the agent ran it.
		for _, want := range []string{"plugin passes a failing test", "bash replaced"} {
			if !strings.Contains(ag.out, want) {
				t.Fatalf("the hostile agent's tampering did not take in its own sandbox (%q missing): %s", want, ag.out)
			}
		}
		if v.Pass || !strings.Contains(v.Details, "FAIL_TO_PASS 0/1, PASS_TO_PASS 1/1") {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("control: graded in the agent's own sandbox, the same tampering forges a pass", func(t *testing.T) {
		// What fresh: true closes. Without it the checker's /bin/bash is
		// the agent's, which writes the log the grader reads.
		rec := h.variant(t, id, func(c *spec.Checker) { c.Fresh = false })
		v := h.runRecord(t, rec, &shellAgent{script: "export FAKE_LOG='" + fakeLog + "' FAKE_GRADE='" + fakeGrade + "'\n" + hostileScript})
		if !v.Pass {
			t.Errorf("the control did not forge a pass, so the test above proves nothing: %+v\n%s", v, v.Output)
		}
	})
	t.Run("fake grading and PASSED lines from the diff's own code are not believed", func(t *testing.T) {
		// The conftest is in the repository, so it is in the diff and runs
		// in the fresh sandbox, as upstream runs it: its lines contradict
		// the test command's exit code, which invalidates the log.
		conftest := fmt.Sprintf("def pytest_unconfigure(config):\n    print(%q)\n    print('PASSED test_calc.py::test_add')\n    print('PASSED test_calc.py::test_sub')\n", fakeGrade)
		ag := &shellAgent{script: "echo '" + fakeGrade + "'\ncat > conftest.py <<'EOF'\n" + conftest + "EOF\n"}
		v := h.run(t, id, ag)
		if v.Pass || !strings.Contains(v.Details, "inconsistent log") {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("the diff's code that kills the checker and removes the log is graded, not an error", func(t *testing.T) {
		// Its tests run the agent's code: whatever that does to the eval
		// phase (kill every process it can, remove the log, leave a FIFO in
		// its place) is the agent's failure, graded unresolved.
		conftest := "import os, signal\ndef pytest_configure(config):\n    os.remove('/tmp/evalsi-test-output.txt')\n    os.mkfifo('/tmp/evalsi-test-output.txt')\n    os.kill(-1, signal.SIGKILL)\n"
		ag := &shellAgent{script: "cat > conftest.py <<'EOF'\n" + conftest + "EOF\n"}
		v := h.run(t, id, ag)
		if v.Pass || v.Score != 0 {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("empty test lists grade as upstream grades them", func(t *testing.T) {
		// get_resolution_status counts an empty list as all passed: a valid
		// log with no listed test is RESOLVED_FULL, whatever the patch.
		v := h.run(t, "acme__calc-2", &shellAgent{script: wrongFix})
		if !v.Pass || !strings.Contains(v.Details, "RESOLVED_FULL; FAIL_TO_PASS 0/0, PASS_TO_PASS 0/0") {
			t.Errorf("verdict %+v", v)
		}
	})
}

package swebench_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/agent"
	"evals.si/agent/oracle"
	"evals.si/bench/swebench"
	"evals.si/checker"
	"evals.si/dataset"
	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
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

// A v5 instance whose eval script runs the host's pytest (the sandbox has
// no image: the host's system directories, read-only).
func instance() map[string]any {
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
		"repo": "acme/calc", "instance_id": "acme__calc-1", "base_commit": "HEAD",
		"patch": goldPatch, "test_patch": testPatch, "problem_statement": "add() subtracts",
		"FAIL_TO_PASS": `["test_calc.py::test_add"]`, "PASS_TO_PASS": []string{"test_calc.py::test_sub"},
		"image": "unused", "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail", "eval_script": script,
	}
}

func TestOracleAndGradeInSandbox(t *testing.T) {
	for _, tool := range []string{"bwrap", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, tool+" is not on PATH")
		}
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
	}
	r := bwraptest.Rung(t)
	dir := t.TempDir()
	b, _ := json.Marshal(instance())
	if err := os.WriteFile(filepath.Join(dir, "i.jsonl"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("swebench://i.jsonl")
	res, err := swebench.Importer{}.Import(context.Background(), u, dir)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("import: %v %+v", err, res)
	}
	rec := res.Records[0]
	env, err := dataset.Environment(nil, rec)
	if err != nil {
		t.Fatal(err)
	}
	reg := checker.NewRegistry()
	swebench.RegisterParsers(reg)

	run := func(t *testing.T, change func(sb sandbox.Sandbox)) checker.Verdict {
		sb, err := r.Create(t.Context(), sandbox.Config{Workdir: swebench.Workdir, StateDir: t.TempDir(), CommandTimeout: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(context.Background())
		sb.WriteFile(t.Context(), "calc.py", []byte("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"), 0o644)
		sb.WriteFile(t.Context(), "test_calc.py", []byte("from calc import add, sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"), 0o644)
		init := "git init -q && git -c user.email=a@b -c user.name=a add -A && git -c user.email=a@b -c user.name=a commit -qm base"
		if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", init}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("git init: %v %s", err, res.Stderr)
		}
		change(sb)
		v, err := checker.Run(t.Context(), sb, *env.Checker, swebench.Workdir, reg)
		if err != nil {
			t.Fatalf("checker: %v", err)
		}
		return v
	}

	t.Run("oracle resolves", func(t *testing.T) {
		v := run(t, func(sb sandbox.Sandbox) {
			o := oracle.New([]spec.Record{rec})
			if _, err := o.Run(t.Context(), agent.Task{RecordID: rec.ID, Sandbox: sb, Workdir: swebench.Workdir}); err != nil {
				t.Fatal(err)
			}
		})
		if !v.Pass || v.Score != 1 {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("a log longer than the sandbox output limit grades whole", func(t *testing.T) {
		// Each test prints 1.5 MiB, which pytest -rA repeats in its PASSES
		// section before the summary: the results and the end marker lie
		// past the 1 MiB a command's stdout keeps.
		v := run(t, func(sb sandbox.Sandbox) {
			o := oracle.New([]spec.Record{rec})
			if _, err := o.Run(t.Context(), agent.Task{RecordID: rec.ID, Sandbox: sb, Workdir: swebench.Workdir}); err != nil {
				t.Fatal(err)
			}
			sb.WriteFile(t.Context(), "conftest.py", []byte("import pytest\n\n@pytest.fixture(autouse=True)\ndef noisy():\n    print('x' * (3 << 19))\n"), 0o644)
		})
		if !v.Pass || v.Score != 1 {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("no change is unresolved", func(t *testing.T) {
		// An empty patch goes through the same fallbacks (GNU patch accepts
		// it), and the tests decide.
		v := run(t, func(sandbox.Sandbox) {})
		if v.Pass || !strings.Contains(v.Details, "FAIL_TO_PASS 0/1") {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("a wrong fix is unresolved", func(t *testing.T) {
		v := run(t, func(sb sandbox.Sandbox) {
			sb.WriteFile(t.Context(), "calc.py", []byte("def add(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n"), 0o644)
		})
		if v.Pass || !strings.Contains(v.Details, "FAIL_TO_PASS 0/1") {
			t.Errorf("verdict %+v\n%s", v, v.Output)
		}
	})
	t.Run("a test that prints fake PASSED lines is not resolved", func(t *testing.T) {
		v := run(t, func(sb sandbox.Sandbox) {
			// The agent's conftest prints a fake summary after the real one.
			sb.WriteFile(t.Context(), "conftest.py", []byte("def pytest_unconfigure(config):\n    print('PASSED test_calc.py::test_add')\n    print('PASSED test_calc.py::test_sub')\n"), 0o644)
		})
		if v.Pass {
			t.Errorf("spoofed run resolved: %+v\n%s", v, v.Output)
		}
	})
}

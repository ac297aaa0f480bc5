package swebench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"evals.si/bench/internal/benchdata"
	"evals.si/internal/testenv/swebenchref"
)

// TestSpecsJSONIsCurrent: the embedded tables are what export_specs.py
// writes from the installed official package, byte for byte.
func TestSpecsJSONIsCurrent(t *testing.T) {
	got := swebenchref.Run(t, "export_specs.py", nil)
	if !bytes.Equal(got, specsJSON) {
		t.Fatalf("bench/swebench/specs.json is not what the official package exports: run python/adapters/swebench/export_specs.py > bench/swebench/specs.json (with python/adapters/swebench/.venv/bin/python)\nfirst difference: %s", firstDiff(string(specsJSON), string(got)))
	}
}

// TestSpecsTables: the tables decode, every language has its builder,
// every MAP_REPO_TO_PARSER name is a parser this build has, the custom
// JavaScript test commands are the ones evalscript.go carries, and the
// markers and FAIL_ONLY_REPOS agree with the grader's.
func TestSpecsTables(t *testing.T) {
	tb, err := tables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.Specs) < 60 {
		t.Fatalf("only %d repos in specs.json", len(tb.Specs))
	}
	for repo := range tb.Specs {
		if !slices.Contains([]string{"py", "js", "c", "go", "java", "php", "rb", "rs"}, tb.Ext[repo]) {
			t.Errorf("%s: language %q has no eval-script builder here", repo, tb.Ext[repo])
		}
	}
	for repo, name := range tb.Parsers {
		if _, ok := Parsers[name]; !ok {
			if _, ok := instanceParsers[name]; !ok {
				t.Errorf("MAP_REPO_TO_PARSER[%s] = %s, which this build does not have", repo, name)
			}
		}
	}
	if !slices.Equal(tb.JSCustomTestCmdRepos, []string{calypsoRepo}) {
		t.Errorf("MAP_REPO_TO_TEST_CMDS has %v; evalscript.go builds the test commands of %s only", tb.JSCustomTestCmdRepos, calypsoRepo)
	}
	if tb.StartTestOutput != StartTestOutput || tb.EndTestOutput != EndTestOutput {
		t.Errorf("markers %q %q differ from the grader's", tb.StartTestOutput, tb.EndTestOutput)
	}
	for _, r := range tb.FailOnlyRepos {
		if !failOnlyRepos[r] {
			t.Errorf("FAIL_ONLY_REPOS has %s, the grader's list does not", r)
		}
	}
}

// A test patch with every shape of file get_modified_files and the test
// directives tell apart: modified, added, deleted, renamed, binary, a
// non-test extension, Django test modules and calypso's paths.
const richTestPatch = `diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py
index 1111111..2222222 100644
--- a/tests/admin_views/tests.py
+++ b/tests/admin_views/tests.py
@@ -1,3 +1,3 @@
 import os
+import sys
 
--- not a header: a removed line of a hunk
diff --git a/client/state/test/index.js b/client/state/test/index.js
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/client/state/test/index.js
@@ -0,0 +1,2 @@
+test('x', () => {});
+// diff --git a/fake b/fake
diff --git a/packages/calypso-ui/test/a.js b/packages/calypso-ui/test/a.js
deleted file mode 100644
index 4444444..0000000
--- a/packages/calypso-ui/test/a.js
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/client/x/__snapshots__/y.js.snap b/client/x/__snapshots__/y.js.snap
--- a/client/x/__snapshots__/y.js.snap
+++ b/client/x/__snapshots__/y.js.snap
@@ -1 +1 @@
-a
+b
\ No newline at end of file
diff --git a/test/e2e/specs/login.js b/test/e2e/specs/login.js
--- a/test/e2e/specs/login.js
+++ b/test/e2e/specs/login.js
@@ -2,2 +2,2 @@ describe
-old
+new
 same
diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json
--- a/tests/fixtures/data.json
+++ b/tests/fixtures/data.json
@@ -1 +1 @@
-{}
+{"a": 1}
diff --git a/src/old_name.py b/src/new_name.py
similarity index 90%
rename from src/old_name.py
rename to src/new_name.py
diff --git a/tests/img/base.png b/tests/img/base.png
new file mode 100644
index 0000000..5555555
Binary files /dev/null and b/tests/img/base.png differ
`

// syntheticClassic is one classic instance of each (repo, version) key
// with the rich test patch and image_assets, one with an empty test patch,
// and instances the harness cannot build a script for.
func syntheticClassic(t *testing.T) []map[string]any {
	tb, err := tables()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	add := func(repo, version, id, patch string) {
		out = append(out, map[string]any{
			"repo": repo, "version": version, "instance_id": id, "base_commit": "0123456789abcdef0123456789abcdef01234567",
			"test_patch": patch, "patch": "", "problem_statement": "p", "FAIL_TO_PASS": `["a"]`, "PASS_TO_PASS": "[]",
			"image_assets": `{"test_patch": [{"path": "tests/img/base.png", "url": "http://example.invalid/base.png"}]}`,
		})
	}
	n := 0
	for _, repo := range slices.Sorted(maps.Keys(tb.Specs)) {
		for _, v := range slices.Sorted(maps.Keys(tb.Specs[repo])) {
			n++
			id := strings.ReplaceAll(repo, "/", "__") + "-" + fmt.Sprint(n)
			add(repo, v, id, richTestPatch)
			add(repo, v, id+"0", "")
		}
	}
	// Refused by both: unknown repo, unknown version, a hunk shorter than
	// its header says.
	add("acme/unknown", "1.0", "acme__unknown-1", richTestPatch)
	add("django/django", "0.0", "django__django-0", richTestPatch)
	add("django/django", "4.2", "django__django-bad", "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1,3 +1,3 @@\n a\n")
	return out
}

// realClassic is every classic instance in the shared samples and the 500
// of SWE-bench Verified in testdata (see its README).
func realClassic(t *testing.T) []map[string]any {
	dir := benchdata.Dir(t, "swebench")
	paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []map[string]any
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var one map[string]any
		var many []map[string]any
		switch {
		case json.Unmarshal(b, &many) == nil:
			out = append(out, many...)
		case json.Unmarshal(b, &one) == nil:
			out = append(out, one)
		default:
			t.Fatalf("%s is neither a JSON object nor an array", p)
		}
	}
	f, err := os.Open(filepath.Join("testdata", "swebench-verified-eval.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for dec := json.NewDecoder(zr); dec.More(); {
		var in map[string]any
		if err := dec.Decode(&in); err != nil {
			t.Fatalf("testdata/swebench-verified-eval.jsonl.gz: %v", err)
		}
		// The file leaves the test lists out (they do not touch the script).
		in["FAIL_TO_PASS"], in["PASS_TO_PASS"] = "[]", "[]"
		out = append(out, in)
	}
	return out
}

// TestClassicEvalScriptMatchesHarness is the differential test: for every
// (repo, version) of MAP_REPO_VERSION_TO_SPECS and the real samples, the
// eval script EvalScript builds equals the official package's byte for
// byte (swebench 4.1.0's make_test_spec(instance).eval_script through
// 5.0.2's make_test_spec, see eval_script.py), and an instance the
// harness fails on is refused.
func TestClassicEvalScriptMatchesHarness(t *testing.T) {
	insts := append(syntheticClassic(t), realClassic(t)...)
	in, err := json.Marshal(insts)
	if err != nil {
		t.Fatal(err)
	}
	var refs []struct {
		InstanceID string `json:"instance_id"`
		V4         string `json:"v4"`
		EvalScript string `json:"eval_script"`
		Error      string `json:"error"`
	}
	if err := json.Unmarshal(swebenchref.Run(t, "eval_script.py", in), &refs); err != nil {
		t.Fatal(err)
	}
	if len(refs) != len(insts) {
		t.Fatalf("the reference answered %d instances of %d", len(refs), len(insts))
	}
	repos := map[string]bool{}
	built := 0
	for i, raw := range insts {
		b, _ := json.Marshal(raw)
		var inst Instance
		if err := json.Unmarshal(b, &inst); err != nil {
			t.Fatal(err)
		}
		ref := refs[i]
		v4, err4 := classicEvalScript(inst)
		got, err := EvalScript(inst)
		switch {
		case ref.Error != "":
			if err == nil || err4 == nil {
				t.Errorf("%s: the harness fails (%s) but Go built a script", inst.InstanceID, strings.TrimSpace(ref.Error))
			}
			continue
		case err != nil || err4 != nil:
			t.Errorf("%s: the harness builds a script but Go refused: %v %v", inst.InstanceID, err4, err)
			continue
		}
		if v4 != ref.V4 {
			t.Errorf("%s (%s %s): swebench 4.1.0's eval script differs: %s", inst.InstanceID, inst.Repo, inst.Version, firstDiff(ref.V4, v4))
		}
		if got != ref.EvalScript {
			t.Errorf("%s (%s %s): the eval script differs from make_test_spec's: %s", inst.InstanceID, inst.Repo, inst.Version, firstDiff(ref.EvalScript, got))
		}
		repos[inst.Repo] = true
		built++
	}
	for _, r := range []string{"django/django", "sympy/sympy", "astropy/astropy", "scikit-learn/scikit-learn", "pytest-dev/pytest", "sphinx-doc/sphinx", "Automattic/wp-calypso", "sqlfluff/sqlfluff"} {
		if !repos[r] {
			t.Errorf("no instance of %s was compared", r)
		}
	}
	t.Logf("%d eval scripts compared over %d repos", built, len(repos))
}

// firstDiff names the first line where got differs from want.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl || i >= len(w) || i >= len(g) {
			return fmt.Sprintf("line %d: want %q, got %q", i+1, wl, gl)
		}
	}
	return "none"
}

// TestV5EvalScriptMatchesHarness: a v5 instance's own eval_script comes
// out as 5.0.2's make_test_spec(instance).eval_script writes it (stripped,
// header lines dropped wherever they are, the exit code recorded around
// the first end marker), for scripts of every shape that matters there.
func TestV5EvalScriptMatchesHarness(t *testing.T) {
	body := "cd /testbed\ngit apply -v - <<'EOF_114329324912'\nx\nEOF_114329324912\n: '>>>>> Start Test Output'\npytest -rA\n: '>>>>> End Test Output'\ngit checkout abc t.py"
	scripts := map[string]string{
		"plain":            body,
		"header":           "#!/bin/bash\nset -uxo pipefail\n" + body + "\n",
		"padded":           "\n\n  \t" + body + "\n\n \x1c",
		"no end marker":    "cd /testbed\npytest\n",
		"two end markers":  body + "\n: '>>>>> End Test Output'\n",
		"header inside":    body + "\nset -uxo pipefail\n#!/bin/bash\necho done\n",
		"crlf":             strings.ReplaceAll(body, "\n", "\r\n"),
		"only the header":  "#!/bin/bash\nset -uxo pipefail\n",
		"marker mid-line":  "echo '>>>>> End Test Output' # the same\n",
		"trailing nbsp":    body + "\u00a0\n",
		"leading newlines": "\n\n" + body,
	}
	var insts []map[string]any
	for _, name := range slices.Sorted(maps.Keys(scripts)) {
		insts = append(insts, map[string]any{"instance_id": name, "repo": "r/r", "version": "1", "image": "img", "log_parser": "parse_log_pytest",
			"eval_type": "pass_and_fail", "eval_script": scripts[name], "FAIL_TO_PASS": []string{"a"}, "PASS_TO_PASS": []string{}})
	}
	in, _ := json.Marshal(insts)
	var refs []struct {
		InstanceID string `json:"instance_id"`
		EvalScript string `json:"eval_script"`
		Error      string `json:"error"`
	}
	if err := json.Unmarshal(swebenchref.Run(t, "eval_script.py", in), &refs); err != nil {
		t.Fatal(err)
	}
	for i, ref := range refs {
		name := insts[i]["instance_id"].(string)
		if ref.Error != "" {
			t.Fatalf("%s: the reference failed: %s", name, ref.Error)
		}
		got, err := EvalScript(Instance{InstanceID: name, EvalScript: scripts[name]})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != ref.EvalScript {
			t.Errorf("%s: the eval script differs from make_test_spec's: %s", name, firstDiff(ref.EvalScript, got))
		}
	}
}

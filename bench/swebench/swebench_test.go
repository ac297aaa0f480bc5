package swebench

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"evals.si/bench/internal/benchdata"
	"evals.si/dataset"
	"evals.si/internal/testenv"
)

// realPytestLog runs pytest, as the harness's TEST_PYTEST does, on a small
// suite with every outcome, and returns its output and exit code.
func realPytestLog(t *testing.T) (string, int) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
	}
	dir := t.TempDir()
	src := `import pytest

def test_ok():
    pass

def test_fail():
    assert 1 == 2, "one - two"

@pytest.mark.skip(reason="no")
def test_skip():
    pass

@pytest.mark.xfail
def test_xfail():
    assert False

@pytest.mark.parametrize("v", ["a b", "/tmp/x/y.txt"])
def test_param(v):
    assert v

class TestK:
    def test_m(self):
        pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture")

def test_error(broken):
    pass
`
	if err := os.WriteFile(filepath.Join(dir, "test_mod.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider", "test_mod.py")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

func TestParsePytestRealLog(t *testing.T) {
	log, _ := realPytestLog(t)
	want := map[string]string{
		"test_mod.py::test_ok":                  "PASSED",
		"test_mod.py::test_fail":                "FAILED",
		"test_mod.py::test_xfail":               "XFAIL",
		"test_mod.py::test_param[a":             "PASSED", // split() cuts ids with spaces, as upstream
		"test_mod.py::test_param[/tmp/x/y.txt]": "PASSED",
		"test_mod.py::TestK::test_m":            "PASSED",
		"test_mod.py::test_error":               "ERROR",
	}
	got := parsePytest(log)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parse_log_pytest: %s = %q, want %q\nlog:\n%s", k, got[k], v, log)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "[") {
			t.Errorf("SKIPPED [N] summary line parsed as test %q", k)
		}
	}
	opt := parsePytestOptions(log)
	if opt["test_mod.py::test_param[/y.txt]"] != "PASSED" {
		t.Errorf("parse_log_pytest_options did not shorten the path option: %v", opt)
	}
	v2 := parsePytestV2(log)
	if v2["test_mod.py::test_param[a b]"] != "PASSED" || v2["test_mod.py::test_fail"] != "FAILED" {
		t.Errorf("parse_log_pytest_v2: %v", v2)
	}
}

// evalLog wraps test output as the eval script's log does.
func evalLog(body string, code int) string {
	return "+ git apply -v -\n+ : '" + StartTestOutput + "'\n" + body + "\n+ SWEBENCH_TEST_EXIT_CODE=" + itoa(code) + "\n+ : '" + EndTestOutput + "'\n>>>>> Test Exit Code: " + itoa(code) + "\n"
}

func itoa(i int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + string(rune('0'+i%10))) }

func TestEvalReport(t *testing.T) {
	log, code := realPytestLog(t)
	if code == 0 {
		t.Fatalf("the suite has failures; pytest exited 0:\n%s", log)
	}
	g := Grade{LogParser: "parse_log_pytest", EvalType: EvalPassAndFail,
		FailToPass: []string{"test_mod.py::test_ok", "test_mod.py::test_xfail"},
		// Not test_skip: pytest's "SKIPPED [N] path:line" summary names no
		// test, so upstream's parser leaves it out and a missing P2P test is
		// a failure (the map-based cases below cover SKIPPED itself).
		PassToPass: []string{"test_mod.py::TestK::test_m"}}
	r := EvalReport(g, evalLog(log, code))
	if !r.Resolved || r.Status != ResolvedFull {
		t.Errorf("report %+v, want resolved", r)
	}

	g.FailToPass = append(g.FailToPass, "test_mod.py::test_fail")
	if r := EvalReport(g, evalLog(log, code)); r.Resolved || r.Status != ResolvedPartial {
		t.Errorf("with a failing F2P: %+v, want RESOLVED_PARTIAL", r)
	}
	// A skipped FAIL_TO_PASS test is a failure in v5.
	g.FailToPass = []string{"test_mod.py::test_skip"}
	g.PassToPass = nil
	sm := map[string]string{"test_mod.py::test_skip": StatusSkipped}
	if tr := EvalTestsReport(sm, g.FailToPass, nil, EvalPassAndFail); len(tr.F2PFailure) != 1 {
		t.Errorf("skipped F2P: %+v", tr)
	}
}

// TestSpoofedLogIsNotResolved: a log that prints fake PASSED lines after a
// failure (the tests exited 1, so something failed) is invalid.
func TestSpoofedLogIsNotResolved(t *testing.T) {
	log, code := realPytestLog(t)
	var fake strings.Builder
	for k := range parsePytest(log) {
		fake.WriteString("PASSED " + k + "\n")
	}
	spoofed := evalLog(log+"\n"+fake.String(), code)
	g := Grade{LogParser: "parse_log_pytest", EvalType: EvalPassAndFail, FailToPass: []string{"test_mod.py::test_fail"}, PassToPass: []string{"test_mod.py::test_ok"}}
	if sm := parsePytest(spoofed); sm["test_mod.py::test_fail"] != StatusPassed {
		t.Fatalf("the spoof did not take: %v", sm)
	}
	r := EvalReport(g, spoofed)
	if r.Resolved || r.PatchSuccessfullyApplied || !strings.Contains(r.Reason, "no test failed") {
		t.Errorf("spoofed log graded %+v, want invalid", r)
	}
	// The same log with the failure honestly reported is simply unresolved.
	if r := EvalReport(g, evalLog(log, code)); r.Resolved || !r.PatchSuccessfullyApplied {
		t.Errorf("honest log graded %+v", r)
	}
}

func TestLogsEvalInvalid(t *testing.T) {
	body := "PASSED a::b\n"
	for name, log := range map[string]string{
		"patch failed":   ApplyPatchFail + "\n" + evalLog(body, 0),
		"timed out":      evalLog(body, 0) + TestsTimeout,
		"no end marker":  "+ : '" + StartTestOutput + "'\n" + body,
		"nothing parsed": evalLog("collected 0 items", 0),
	} {
		if _, found, reason := LogsEval(log, total(parsePytest)); found || reason == "" {
			t.Errorf("%s: found=%v reason=%q", name, found, reason)
		}
	}
	if sm, found, _ := LogsEval(evalLog("", 0)+"3 passing\n", total(parsePytest)); !found || len(sm) != 0 {
		t.Errorf("SUITE_RAN log: found=%v sm=%v", found, sm)
	}
}

func TestResolveTruncatedID(t *testing.T) {
	sm := map[string]string{"t.py::test_c[\\n-x]": StatusPassed, "t.py::test_c[\\n-y]": StatusXFail, "t.py::test_d[a]": StatusPassed, "t.py::test_d[b]": StatusFailed}
	if !testPassed("t.py::test_c[\\n", sm) {
		t.Error("agreeing prefix matches must resolve")
	}
	if testPassed("t.py::test_d[", sm) || !testFailed("t.py::test_d[", sm) {
		t.Error("disagreeing prefix matches must not resolve")
	}
	if testPassed("t.py::test_c", sm) {
		t.Error("a complete id must match exactly")
	}
}

func TestOtherParsers(t *testing.T) {
	cases := []struct {
		name string
		log  string
		want map[string]string
	}{
		{"parse_log_django", "test_a (m.T) ... ok\ntest_b (m.T) ... FAIL\ntest_c (m.T) ... skipped 'x'\ntest_d (m.T) ... some output\nok\nERROR: test_e (m.T)\n",
			map[string]string{"test_a (m.T)": "PASSED", "test_b (m.T)": "FAILED", "test_c (m.T)": "SKIPPED", "test_d (m.T)": "PASSED", "test_e": "ERROR"}},
		{"parse_log_sympy", "test_x ok\ntest_y F\ntest_z E\n________ sympy/core/tests/test_a.py:test_w ________\n",
			map[string]string{"test_x": "PASSED", "test_y": "FAILED", "test_z": "ERROR", "sympy/core/tests/test_a.py:test_w": "FAILED"}},
		{"parse_log_gotest", "--- PASS: TestA (0.00s)\n    --- FAIL: TestB/sub (0.01s)\n--- SKIP: TestC (0.00s)\n",
			map[string]string{"TestA": "PASSED", "TestB/sub": "FAILED", "TestC": "SKIPPED"}},
		{"parse_log_cargo", "test a::b ... ok\ntest c ... FAILED\ntest d ... ignored\n",
			map[string]string{"a::b": "PASSED", "c": "FAILED"}},
		{"parse_log_jest", "  ✓ adds (3 ms)\n  ✕ subtracts\n  ○ skipped one\n",
			map[string]string{"adds": "PASSED", "subtracts": "FAILED", "skipped one": "SKIPPED"}},
		{"parse_log_matplotlib", "PASSED lib/t.py::test_b[MouseButton.LEFT]\n",
			map[string]string{"lib/t.py::test_b[1]": "PASSED"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, err := Parsers[c.name](c.log); err != nil || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v (%v), want %v", got, err, c.want)
			}
		})
	}
}

func TestImportSample(t *testing.T) {
	dir := benchdata.Dir(t, "swebench")
	u, _ := url.Parse("swebench://swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json?oracle=true")
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 1 || len(res.Refused) != 0 {
		t.Fatalf("records %d refused %v", len(res.Records), res.Refused)
	}
	r := res.Records[0]
	env, err := dataset.Environment(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if env.Image != "swebench/sweb.eval.x86_64.sqlfluff_1776_sqlfluff-2386:latest" || env.Sandbox.Workdir != "/testbed" {
		t.Errorf("env %+v", env)
	}
	if env.Files[".evalsi-gold.patch"] == "" {
		t.Error("oracle=true did not add .evalsi-gold.patch")
	}
	script := env.Checker.Files["/eval.sh"]
	for _, want := range []string{
		"#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\n",
		"python -m pip install -e .\ngit checkout 23d698607b45b8469c766b521d27e9a6e92e8739 test/core/rules/docstring_test.py test/rules/std_L054_test.py\n",
		"git apply -v - <<'EOF_114329324912'\ndiff --git",
		": '>>>>> Start Test Output'\npytest -rA test/core/rules/docstring_test.py test/rules/std_L054_test.py\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\necho \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\ngit checkout 23d6",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("eval script lacks %q:\n%s", want, script)
		}
	}
	if env.Checker.Parser != ParserGrade || !strings.Contains(env.Checker.Command[2], `"git apply --verbose" "git apply --verbose --3way" "git apply --verbose --reject" "patch --batch --forward --fuzz=5 -p1 -i"`) {
		t.Errorf("checker %v", env.Checker.Command)
	}
	if r.Metadata["solution"] == nil {
		t.Error("no oracle solution")
	}
}

func TestImportRefusesUnknownClassicRepo(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "i.jsonl")
	os.WriteFile(p, []byte(`{"repo":"acme/x","instance_id":"acme__x-1","base_commit":"abc","patch":"","test_patch":"","version":"1","FAIL_TO_PASS":"[\"a\"]","PASS_TO_PASS":"[]"}`+"\n"), 0o644)
	u, _ := url.Parse("swebench:///" + p)
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, "no harness specs for acme/x") {
		t.Errorf("refused %+v", res.Refused)
	}
}

// TestImportEveryClassicRepo: a classic instance of every (repo, version)
// of the harness's tables imports, with the eval script EvalScript builds
// and the parser MAP_REPO_TO_PARSER names, except where the harness itself
// cannot run it (no test_cmd, no parser), which is refused with the reason.
func TestImportEveryClassicRepo(t *testing.T) {
	tb, err := tables()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	byID := map[string]Instance{}
	for repo, versions := range tb.Specs {
		for v := range versions {
			in := Instance{Repo: repo, Version: v, InstanceID: strings.ReplaceAll(repo, "/", "__") + "-" + v, // jekyll's and immutable-js's parsers know PR numbers
				BaseCommit: "abc", TestPatch: richTestPatch, FailToPass: []string{"a"}, PassToPass: []string{}}
			b, _ := json.Marshal(in)
			lines = append(lines, string(b))
			byID[in.InstanceID] = in
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "i.jsonl"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("swebench://i.jsonl")
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Refused {
		in := byID[r.Task]
		switch {
		case in.Repo == "dbt-labs/dbt-core" && strings.Contains(r.Reason, "have no test_cmd"):
		case in.Repo == humanevalRepo && strings.Contains(r.Reason, "not in SWE-bench's MAP_REPO_TO_PARSER"):
		default:
			t.Errorf("%s (%s %s) refused: %s", r.Task, in.Repo, in.Version, r.Reason)
		}
	}
	if len(res.Records) < len(lines)-30 {
		t.Errorf("only %d of %d classic instances imported", len(res.Records), len(lines))
	}
	for _, r := range res.Records {
		in := byID[r.ID]
		env, err := dataset.Environment(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := EvalScript(in)
		if err != nil {
			t.Fatal(err)
		}
		if env.Checker.Files["/eval.sh"] != want {
			t.Errorf("%s: the record's eval script is not EvalScript's", r.ID)
		}
		var g Grade
		if err := json.Unmarshal(env.Checker.ParserArgs, &g); err != nil {
			t.Fatal(err)
		}
		if g.LogParser != tb.Parsers[in.Repo] {
			t.Errorf("%s: parser %q, MAP_REPO_TO_PARSER says %q", r.ID, g.LogParser, tb.Parsers[in.Repo])
		}
	}
}

// TestImportDuplicateInstanceID: a file with an instance_id twice imports
// with a note naming it, keeping one copy: the last, in the first one's
// place, as the harness's report shows it.
func TestImportDuplicateInstanceID(t *testing.T) {
	dir := benchdata.Dir(t, "swebench")
	b, err := os.ReadFile(filepath.Join(dir, "swe-bench-dev-easy.sqlfluff__sqlfluff-2386.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sample []map[string]any
	if err := json.Unmarshal(b, &sample); err != nil || len(sample) == 0 {
		t.Fatalf("the sample is not a JSON array of instances: %v", err)
	}
	first, other := sample[0], maps.Clone(sample[0])
	other["instance_id"] = "sqlfluff__sqlfluff-1"
	last := maps.Clone(first)
	last["FAIL_TO_PASS"] = []string{"the last copy's test"}
	var lines []string
	for _, in := range []map[string]any{first, other, last} {
		b, _ := json.Marshal(in)
		lines = append(lines, string(b))
	}
	tmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(tmp, "i.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("swebench://i.jsonl")
	res, err := Importer{}.Import(context.Background(), u, tmp)
	if err != nil {
		t.Fatalf("a duplicated instance_id refused the whole file: %v", err)
	}
	var ids []string
	for _, r := range res.Records {
		ids = append(ids, r.ID)
	}
	if want := "sqlfluff__sqlfluff-2386 sqlfluff__sqlfluff-1"; strings.Join(ids, " ") != want {
		t.Fatalf("imported %v, want %s (one copy, in the first one's place)", ids, want)
	}
	env, err := dataset.Environment(nil, res.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	var g Grade
	if err := json.Unmarshal(env.Checker.ParserArgs, &g); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.FailToPass, []string{"the last copy's test"}) {
		t.Errorf("kept FAIL_TO_PASS %v, want the last copy's", g.FailToPass)
	}
	notes := res.Notes["sqlfluff__sqlfluff-2386"]
	if len(notes) != 1 || !strings.Contains(notes[0], "instance_id sqlfluff__sqlfluff-2386 appears 2 times in the file (instances 1, 3): the last copy is kept") {
		t.Errorf("notes %q", res.Notes)
	}
	if len(res.Notes["sqlfluff__sqlfluff-1"]) != 0 {
		t.Errorf("a unique id got notes: %q", res.Notes["sqlfluff__sqlfluff-1"])
	}
}

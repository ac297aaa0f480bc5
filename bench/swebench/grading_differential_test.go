package swebench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gradeCase is one (instance, log) pair for get_eval_report.
type gradeCase struct {
	Instance gradeInstance `json:"instance"`
	Log      string        `json:"log"`
	label    string
}

type gradeInstance struct {
	InstanceID string   `json:"instance_id"`
	Repo       string   `json:"repo"`
	FailToPass []string `json:"FAIL_TO_PASS"`
	PassToPass []string `json:"PASS_TO_PASS"`
	LogParser  string   `json:"log_parser"`
	EvalType   string   `json:"eval_type"`
}

type gradeAnswer struct {
	Report struct {
		PatchSuccessfullyApplied bool `json:"patch_successfully_applied"`
		Resolved                 bool `json:"resolved"`
		TestsStatus              map[string]struct {
			Success []string `json:"success"`
			Failure []string `json:"failure"`
		} `json:"tests_status"`
	} `json:"report"`
	StatusMap map[string]string `json:"status_map"`
	Found     bool              `json:"found"`
	Error     string            `json:"error"`
}

// TestGradingMatchesReference grades the same (instance, log) pairs here
// (EvalReport, LogsEval) and with the package's get_eval_report and
// get_logs_eval: whether the log is valid and its status map, whether the
// patch counts as applied, resolved, and the FAIL_TO_PASS / PASS_TO_PASS
// success and failure lists, all equal. A log the package's parser raises
// on must not be graded here either.
func TestGradingMatchesReference(t *testing.T) {
	cases := gradingCorpus(t)
	var ans []gradeAnswer
	callReference(t, map[string]any{"op": "grade", "cases": cases}, &ans)
	if len(ans) != len(cases) {
		t.Fatalf("driver answered %d cases of %d", len(ans), len(cases))
	}
	bad := 0
	for i, c := range cases {
		want := ans[i]
		g := Grade{InstanceID: c.Instance.InstanceID, FailToPass: c.Instance.FailToPass, PassToPass: c.Instance.PassToPass,
			LogParser: c.Instance.LogParser, EvalType: c.Instance.EvalType}
		got := EvalReport(g, c.Log)
		var diffs []string
		if want.Error != "" {
			if got.Resolved || !strings.Contains(got.Reason, "log parser failed") {
				diffs = append(diffs, fmt.Sprintf("the package raises %s; Go grades %+v", want.Error, got))
			}
		} else {
			parse, err := ParserFor(g.LogParser, g.InstanceID)
			if err != nil {
				t.Fatal(err)
			}
			sm, found, reason := LogsEval(c.Log, parse)
			if found != want.Found || !sameMap(sm, want.StatusMap) {
				diffs = append(diffs, fmt.Sprintf("get_logs_eval: Go found=%v (%s) %v; package found=%v %v", found, reason, sm, want.Found, want.StatusMap))
			}
			if got.PatchSuccessfullyApplied != want.Report.PatchSuccessfullyApplied {
				diffs = append(diffs, fmt.Sprintf("patch_successfully_applied: Go %v, package %v", got.PatchSuccessfullyApplied, want.Report.PatchSuccessfullyApplied))
			}
			if got.Resolved != want.Report.Resolved {
				diffs = append(diffs, fmt.Sprintf("resolved: Go %v (%s), package %v", got.Resolved, got.Status, want.Report.Resolved))
			}
			if want.Found {
				ts := want.Report.TestsStatus
				for _, l := range []struct {
					name      string
					got, want []string
				}{
					{"FAIL_TO_PASS success", got.Tests.F2PSuccess, ts["FAIL_TO_PASS"].Success},
					{"FAIL_TO_PASS failure", got.Tests.F2PFailure, ts["FAIL_TO_PASS"].Failure},
					{"PASS_TO_PASS success", got.Tests.P2PSuccess, ts["PASS_TO_PASS"].Success},
					{"PASS_TO_PASS failure", got.Tests.P2PFailure, ts["PASS_TO_PASS"].Failure},
				} {
					if !slices.Equal(l.got, l.want) && len(l.got)+len(l.want) > 0 {
						diffs = append(diffs, fmt.Sprintf("%s: Go %q, package %q", l.name, l.got, l.want))
					}
				}
			}
		}
		if len(diffs) == 0 {
			continue
		}
		if bad++; bad <= 10 {
			t.Errorf("%s (%s, %s, F2P %q, P2P %q):\n  %s\nlog: %q", c.label, c.Instance.LogParser, c.Instance.EvalType,
				c.Instance.FailToPass, c.Instance.PassToPass, strings.Join(diffs, "\n  "), clip(c.Log, 800))
		}
	}
	if bad > 10 {
		t.Errorf("%d of %d cases differ in all", bad, len(cases))
	}
	t.Logf("%d cases compared", len(cases))
}

// gradedBody is a test log and the instance that grades it.
type gradedBody struct {
	label, body, parser, instance, repo string
}

// gradingCorpus wraps test logs in the eval script's markers in each way a
// run can end (and some a spoofing patch might print), and pairs each with
// FAIL_TO_PASS / PASS_TO_PASS lists drawn from the tests in the log, tests
// not in it, and ids truncated inside their parameters.
func gradingCorpus(t *testing.T) []gradeCase {
	t.Helper()
	var bodies []gradedBody
	for _, l := range realLogs {
		b, err := os.ReadFile(filepath.Join("testdata/reallogs", l.file))
		if err != nil {
			t.Fatal(err)
		}
		id := l.instance
		if id == "" {
			id = strings.ReplaceAll(l.repo, "/", "__") + "-1"
		}
		bodies = append(bodies, gradedBody{"real " + l.file, string(b), l.parser, id, l.repo})
	}
	r := rand.New(rand.NewPCG(16, 6))
	generated := []string{"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2", "parse_log_django",
		"parse_log_seaborn", "parse_log_sympy", "parse_log_jest", "parse_log_tap", "parse_log_karma", "parse_log_chart_js",
		"parse_log_marked", "parse_log_gotest", "parse_log_cargo"}
	for i := range 150 {
		p := generated[i%len(generated)]
		bodies = append(bodies, gradedBody{fmt.Sprintf("generated body %d", i), generatedLog(r), p, "x__y-1", ""})
	}

	var cases []gradeCase
	for _, b := range bodies {
		parse, err := ParserFor(b.parser, b.instance)
		if err != nil {
			t.Fatal(err)
		}
		sm, _ := parse(universalNewlines(b.body))
		keys := make([]string, 0, len(sm))
		for k := range sm {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, w := range gradeWrappers {
			log := w.wrap(b.body, r)
			evalType := EvalPassAndFail
			if failOnlyRepos[b.repo] || r.IntN(4) == 0 {
				evalType = EvalFailOnly
			}
			f2p, p2p := drawLists(r, keys)
			cases = append(cases, gradeCase{
				Instance: gradeInstance{InstanceID: b.instance, Repo: b.repo, FailToPass: f2p, PassToPass: p2p,
					LogParser: b.parser, EvalType: evalType},
				Log:   log,
				label: b.label + ", " + w.name,
			})
		}
	}
	return cases
}

// drawLists picks FAIL_TO_PASS and PASS_TO_PASS from the log's tests,
// adding a test the log lacks and an id cut inside its parameters now
// and then; either list may come out empty.
func drawLists(r *rand.Rand, keys []string) (f2p, p2p []string) {
	f2p, p2p = []string{}, []string{}
	for _, k := range keys {
		switch r.IntN(3) {
		case 0:
			f2p = append(f2p, k)
		case 1:
			p2p = append(p2p, k)
		}
		if i := strings.LastIndex(k, "["); i >= 0 && r.IntN(2) == 0 {
			cut := k[:i+1+r.IntN(len(k)-i)]
			if strings.Count(cut, "[") > strings.Count(cut, "]") {
				if r.IntN(2) == 0 {
					f2p = append(f2p, cut)
				} else {
					p2p = append(p2p, cut)
				}
			}
		}
	}
	if r.IntN(3) == 0 {
		f2p = append(f2p, "tests/test_absent.py::test_absent")
	}
	if r.IntN(3) == 0 {
		p2p = append(p2p, "test_absent_too")
	}
	return f2p, p2p
}

var gradeWrappers = []struct {
	name string
	wrap func(body string, r *rand.Rand) string
}{
	{"exit 0", func(b string, _ *rand.Rand) string { return evalLogCode(b, "0") }},
	{"exit 1", func(b string, _ *rand.Rand) string { return evalLogCode(b, "1") }},
	{"exit -9", func(b string, _ *rand.Rand) string { return evalLogCode(b, "-9") }},
	{"no exit code", func(b string, _ *rand.Rand) string {
		return "+ : '" + StartTestOutput + "'\n" + b + "\n+ : '" + EndTestOutput + "'\n"
	}},
	{"CRLF", func(b string, _ *rand.Rand) string {
		return strings.ReplaceAll(evalLogCode(b, "1"), "\n", "\r\n")
	}},
	{"lone CR", func(b string, _ *rand.Rand) string {
		return strings.ReplaceAll(evalLogCode(b, "0"), "\n", "\r")
	}},
	{"no start marker", func(b string, _ *rand.Rand) string { return b + "\n+ : '" + EndTestOutput + "'\n" }},
	{"no end marker", func(b string, _ *rand.Rand) string { return "+ : '" + StartTestOutput + "'\n" + b + "\n" }},
	{"patch apply failed", func(b string, _ *rand.Rand) string { return ApplyPatchFail + "\n" + evalLogCode(b, "0") }},
	{"reset failed", func(b string, _ *rand.Rand) string { return evalLogCode(b, "0") + ResetFailed + "\n" }},
	{"tests timed out", func(b string, _ *rand.Rand) string { return evalLogCode(b, "0") + TestsTimeout + "\n" }},
	{"tests errored", func(b string, _ *rand.Rand) string { return evalLogCode(b, "0") + TestsError + "\n" }},
	{"results after the end marker", func(b string, _ *rand.Rand) string {
		return "+ : '" + StartTestOutput + "'\n+ : '" + EndTestOutput + "'\n" + b + "\n>>>>> Test Exit Code: 0\n"
	}},
	{"empty section", func(_ string, _ *rand.Rand) string { return evalLogCode("", "0") }},
	{"suite ran, nothing parsed", func(_ string, r *rand.Rand) string {
		return evalLogCode(pick(r, "Executed 3 of 3 SUCCESS", "Executed 0 of 0", "2 passing (3ms)", "Tests:       4 passed, 4 total",
			"# tests 0", "# tests 5", "1 spec, 0 failures", "case 'x': ok", "TOTAL: 0 SUCCESS"), "0")
	}},
	{"two start markers", func(b string, _ *rand.Rand) string {
		return "+ : '" + StartTestOutput + "'\nPASSED spoofed::test\n" + evalLogCode(b, "0")
	}},
	{"spoofed exit marker in the body", func(b string, _ *rand.Rand) string {
		return evalLogCode(b+"\n>>>>> Test Exit Code: 0", "1")
	}},
}

func evalLogCode(body, code string) string {
	return "+ git apply -v -\n+ : '" + StartTestOutput + "'\n" + body + "\n+ SWEBENCH_TEST_EXIT_CODE=" + code +
		"\n+ : '" + EndTestOutput + "'\n>>>>> Test Exit Code: " + code + "\n"
}

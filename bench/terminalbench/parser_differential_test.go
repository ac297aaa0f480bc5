package terminalbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

// The differential tests run Terminal-Bench's own parsers (terminal-bench
// 0.2.18, imported module by module from its wheel by
// python/adapters/reference/terminalbench.py, since the package as a whole
// needs Python 3.12) and this package's on the same outputs: the parsed
// results must be equal, and one must fail (PARSE_ERROR) exactly where the
// other does.

const tbWheel = "terminal_bench-0.2.18-py3-none-any.whl"

func referenceParse(t *testing.T, parser string, outputs []string) []tbAnswer {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	wheel := os.Getenv("EVALSI_TERMINALBENCH_WHEEL")
	if wheel == "" {
		wheel = filepath.Join(root, "python/adapters/reference/wheels", tbWheel)
	}
	if _, err := os.Stat(wheel); err != nil {
		testenv.Missing(t, "Terminal-Bench wheel", wheel+" is missing; run python/adapters/reference/fetch-wheels.sh")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Missing(t, "python3", "not on PATH")
	}
	in, err := json.Marshal(map[string]any{"parser": parser, "outputs": outputs})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join(root, "python/adapters/reference/terminalbench.py"), wheel)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference terminalbench.py: %v\n%s", err, stderr.Bytes())
	}
	var ans []tbAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Fatalf("reference answer: %v", err)
	}
	if len(ans) != len(outputs) {
		t.Fatalf("reference answered %d outputs of %d", len(ans), len(outputs))
	}
	return ans
}

type tbAnswer struct {
	Results map[string]Status `json:"results"`
	Error   string            `json:"error"`
}

func compareParser(t *testing.T, name string, parse func(string) (map[string]Status, error), outputs []string) {
	t.Helper()
	ans := referenceParse(t, name, outputs)
	bad := 0
	for i, o := range outputs {
		got, err := parse(o)
		want := ans[i]
		var diff string
		switch {
		case err != nil && want.Error == "":
			diff = fmt.Sprintf("Go fails (%v), Terminal-Bench gives %v", err, want.Results)
		case err == nil && want.Error != "":
			diff = fmt.Sprintf("Terminal-Bench raises %s, Go gives %v", want.Error, got)
		case err == nil && !reflect.DeepEqual(got, want.Results) && len(got)+len(want.Results) > 0:
			diff = fmt.Sprintf("Go %v\n  Terminal-Bench %v", got, want.Results)
		}
		if diff == "" {
			continue
		}
		if bad++; bad <= 10 {
			q := fmt.Sprintf("%q", o)
			if len(q) > 600 {
				q = q[:300] + "…" + q[len(q)-300:]
			}
			t.Errorf("output %d: %s\n  output: %s", i, diff, q)
		}
	}
	if bad > 10 {
		t.Errorf("%d of %d outputs differ in all", bad, len(outputs))
	}
	t.Logf("%d outputs compared", len(outputs))
}

// TestPytestParserMatchesReference: PytestParser.parse and ParsePytest on
// hand-written edge cases (no summary header, a header in other case or
// spacing, every status and a few that are not, FAILED descriptions with
// several " - ", line breaks Python's splitlines knows), long logs whose
// summary is last, outputs as the tmux pane wraps them, and generated ones.
func TestPytestParserMatchesReference(t *testing.T) {
	header := "=========================== short test summary info ============================\n"
	outputs := []string{
		"",
		"no summary at all\nPASSED t.py::a\n",
		"== short test summary info ==",
		header,
		"=short test summary info=\nPASSED a::b\n",
		"==  Short Test Summary Info\t==\nPASSED a::b\n",
		"==\u00a0short\u2003test summary info\u3000==\nPASSED a::b\n",
		"==\x1cshort test summary info==\nPASSED a::b\n",
		"== short  test summary info ==\nPASSED a::b\n",
		"short test summary info\nPASSED a::b\n",
		header + "PASSED t.py::a\nXFAIL t.py::b - why\nSKIPPED t.py::c\nXPASS t.py::d\nERROR t.py::e - boom\nFAILED t.py::f - a - b\nUNKNOWN t.py::g\npassed t.py::h\n",
		header + "SKIPPED [1] t.py:3: unconditional skip\nSKIPPED [2] t.py:9\n",
		header + "FAILED t.py::a - \nFAILED - \nFAILED t.py::b-c - d\nFAILED:\tt.py::c\nPASSED: t.py::d\n:PASSED: t.py::e\n",
		header + "PASSED t.py::\nPASSED ::\nPASSED ::x::y\nPASSED   spaced   name  \nPASSED\n  PASSED indented::x\n",
		header + "PASSED a\x1fb::c\nPASSED a\vb\nPASSED x\fy\nPASSED p\x1cq\nPASSED r\u2028s\nPASSED u\x85v\nPASSED w\r\nPASSED crlf::x\r\nPASSED cr::y\rPASSED cr::z\n",
		header + "PASSED t.py::a\n" + header + "FAILED t.py::a\n",
		"PASSED before::header\n" + header + "FAILED t.py::a\n",
		header + "PASSED t.py::test_ü[名前]\nFAILED t.py::test_x[a - b] - assert\n",
		strings.Repeat("x", 200000) + "\n" + header + "PASSED t.py::a\n",
		strings.Repeat("tests/t.py::test_x PASSED\n", 20000) + header + "FAILED t.py::z - no\n",
		// The tmux pane wraps a long summary line; the parser sees the
		// pieces as lines of their own.
		Pane(header + "FAILED tests/test_outputs.py::test_" + strings.Repeat("long", 60) + " - AssertionError: " + strings.Repeat("y", 300) + "\nPASSED tests/test_outputs.py::test_ok\n"),
		Pane("\x1b[31m" + header + "\x1b[0mFAILED t.py::a\r\nPASSED t.py::b\rPASSED t.py::c\n"),
	}
	r := rand.New(rand.NewPCG(16, 18))
	for range 300 {
		outputs = append(outputs, generatedPytestOutput(r))
	}
	compareParser(t, "pytest", ParsePytest, outputs)
}

// TestSWEBenchParserMatchesReference: SWEBenchParser.parse and
// ParseSWEBench, markers present, absent, repeated and out of order.
func TestSWEBenchParserMatchesReference(t *testing.T) {
	const s, e = "SWEBench results starts here", "SWEBench results ends here"
	outputs := []string{
		"", "PASSED", s + "\nPASSED\n", e + "\nPASSED\n",
		s + "\nPASSED\n" + e, s + "PASSED" + e, s + "\n FAILED \n" + e,
		s + "\n\u00a0PASSED\x1c\n" + e, s + "\npassed\n" + e,
		e + " " + s + "\nPASSED\n", e + "\n" + s + "\nPASSED\n" + e + "\nFAILED\n" + e,
		s + "\nPASSED\n" + e + "\n" + s + "\nFAILED\n" + e,
		s + s + "PASSED" + e,
		s + "\nPASSED\n" + e + "\nPASSED\n" + e,
	}
	compareParser(t, "swebench", ParseSWEBench, outputs)
}

// generatedPytestOutput is pytest-like output: progress lines, maybe a
// summary header, and summary lines with odd statuses, separators and
// whitespace.
func generatedPytestOutput(r *rand.Rand) string {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	var b strings.Builder
	for range r.IntN(5) {
		b.WriteString("tests/test_outputs.py::test_" + pick("a", "b", "c") + " " + pick("PASSED", "FAILED") + " [ 50%]\n")
	}
	if r.IntN(6) != 0 {
		b.WriteString(pick("=", "==", "=====") + pick(" ", "", "\t", "  ") + pick("short test summary info", "SHORT TEST SUMMARY INFO", "Short test summary info") + pick(" ", "", "\t") + pick("=", "===") + pick("\n", "", "\r\n"))
	}
	for range r.IntN(12) {
		status := pick("PASSED", "FAILED", "SKIPPED", "XFAIL", "XPASS", "ERROR", "UNKNOWN", "FAILED:", "PASSED:", "passed", "FAIL", "")
		name := pick("tests/test_outputs.py::", "", "t.py::C::", "::") + pick("test_a", "test_b[1-2]", "test ü", "", "x - y", "test_c - d - e")
		sep := pick(" ", "  ", "\t", "\u00a0", "\x1f", " - ")
		line := status + sep + name
		if r.IntN(3) == 0 {
			line += pick(" - AssertionError", " - ", " -", "\x1c", " ")
		}
		if r.IntN(5) == 0 {
			line = pick(" ", "\t", "\x1f") + line
		}
		b.WriteString(line + pick("\n", "\n", "\r\n", "\r", "\v", "\u2028"))
	}
	if r.IntN(2) == 0 {
		b.WriteString("==== 1 failed, 2 passed in 0.12s ====\n")
	}
	return b.String()
}

package terminalbench

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"evals.si/checker"
	"evals.si/internal/testenv"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestTestTimeoutIsUnresolved runs the checker Terminal-Bench tasks get in
// a real sandbox: run-tests.sh past max_test_timeout_sec is scored
// unresolved (Terminal-Bench's TEST_TIMEOUT), not an infrastructure error;
// one that finishes is graded by the pytest parser as before.
func TestTestTimeoutIsUnresolved(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		testenv.Missing(t, "timeout", "coreutils' timeout is not on PATH")
	}
	sb := bwraptest.New(t, "/app")
	reg := checker.NewRegistry()
	RegisterParsers(reg)
	check := func(t *testing.T, script string, limitSec float64) checker.Verdict {
		t.Helper()
		cfg := spec.Checker{
			Files:   map[string]string{"/tests/run-tests.sh": script},
			Command: []string{"bash", "-c", testCommand(limitSec)},
			Parser:  ParserPytest,
			Timeout: spec.Duration(time.Duration(limitSec*float64(time.Second)) + testTimeoutGrace),
		}
		v, err := checker.Run(t.Context(), sb, cfg, "/app", reg)
		if err != nil {
			t.Fatalf("checker: %v", err)
		}
		return v
	}
	t.Run("timed out", func(t *testing.T) {
		// A summary printed before the hang does not count: the harness
		// does not parse a timed-out run.
		v := check(t, "echo '=== short test summary info ==='\necho 'PASSED test_x.py::test_a'\nsleep 600\n", 0.5)
		if v.Pass || !strings.Contains(v.Details, "TEST_TIMEOUT") {
			t.Errorf("verdict %+v", v)
		}
	})
	t.Run("finished", func(t *testing.T) {
		v := check(t, "echo '=== short test summary info ==='\necho 'PASSED test_x.py::test_a'\nexit 1\n", 60)
		if !v.Pass || v.Score != 1 {
			t.Errorf("verdict %+v", v)
		}
	})
}

// TestLongLogParsedFromItsEnd runs a run-tests.sh whose output is longer
// than the sandbox keeps of a command's output: pytest's summary, printed
// last, still reaches the parser, so the verdict is the tests' and not
// Terminal-Bench's PARSE_ERROR. Failures in the summary still fail it.
func TestLongLogParsedFromItsEnd(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		testenv.Missing(t, "timeout", "coreutils' timeout is not on PATH")
	}
	sb := bwraptest.New(t, "/app")
	reg := checker.NewRegistry()
	RegisterParsers(reg)
	// About 2.6 MB of log on stdout and stderr, then the summary.
	noise := "yes 'log line 0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000' | head -n 24000\nyes 'warning' | head -n 24000 >&2\n"
	cases := []struct {
		name, summary string
		pass          bool
	}{
		{"passing", "echo '=== short test summary info ==='\necho 'PASSED test_x.py::test_a'\necho 'PASSED test_x.py::test_b'\n", true},
		{"failing", "echo '=== short test summary info ==='\necho 'PASSED test_x.py::test_a'\necho 'FAILED test_x.py::test_b - assert 0'\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := spec.Checker{
				Files:   map[string]string{"/tests/run-tests.sh": noise + c.summary},
				Command: []string{"bash", "-c", testCommand(120)},
				Parser:  ParserPytest,
				Timeout: spec.Duration(120*time.Second + testTimeoutGrace),
			}
			v, err := checker.Run(t.Context(), sb, cfg, "/app", reg)
			if err != nil {
				t.Fatalf("checker: %v", err)
			}
			if v.Pass != c.pass || !strings.Contains(v.Details, "test_b") {
				t.Errorf("verdict %+v, want pass=%v with test_b graded", v, c.pass)
			}
		})
	}
}

package terminalbench

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParsePytest(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want map[string]Status
		err  error
	}{
		{
			name: "statuses map as Terminal-Bench maps them",
			in: `============================= test session starts ==============================
tests/test_outputs.py::test_a PASSED
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_a
XFAIL tests/test_outputs.py::test_b - reason
SKIPPED tests/test_outputs.py::test_c
XPASS tests/test_outputs.py::test_d
ERROR tests/test_outputs.py::test_e - boom
FAILED tests/test_outputs.py::TestK::test_f - assert 1 - 2 == 0
UNKNOWN tests/test_outputs.py::test_g
passed tests/test_outputs.py::test_h
PASSED
========================= 2 failed, 2 passed in 0.1s ==========================
`,
			// Only FAILED lines lose a description, and only the last " - "
			// part of it: names keep the rest, exactly as upstream.
			want: map[string]Status{"test_a": Passed, "test_b - reason": Passed, "test_c": Passed, "test_d": Failed, "test_e - boom": Failed, "TestK::test_f - assert 1": Failed},
		},
		{
			name: "a later line wins",
			in:   "== short test summary info ==\nFAILED t.py::x - no\nPASSED t.py::x\n",
			want: map[string]Status{"x": Passed},
		},
		{
			name: "no :: keeps the whole name",
			in:   "=== SHORT TEST SUMMARY INFO ===\nPASSED aider_polyglot_test\n",
			want: map[string]Status{"aider_polyglot_test": Passed},
		},
		{
			name: "empty summary",
			in:   "=== short test summary info ===\n=== 0 passed ===\n",
			want: map[string]Status{},
		},
		{
			name: "missing summary",
			in:   "tests/test_outputs.py::test_a PASSED\n1 passed in 0.1s\n",
			err:  ErrNoSummary,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParsePytest(c.in)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if c.err == nil && !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestResolved(t *testing.T) {
	if !Resolved(map[string]Status{}) {
		t.Error("an empty result is resolved in Terminal-Bench (all([]) is true)")
	}
	if Resolved(map[string]Status{"a": Passed, "b": Failed}) {
		t.Error("a failed test must not resolve")
	}
}

func TestPaneWrapsAt160Columns(t *testing.T) {
	long := "FAILED tests/test_outputs.py::test_" + strings.Repeat("x", 150) + " - AssertionError"
	pane := Pane("\x1b[31m=== short test summary info ===\x1b[0m\n" + long + "\n")
	lines := strings.Split(pane, "\n")
	if len(lines[1]) != PaneWidth {
		t.Fatalf("first wrapped line is %d columns, want %d", len(lines[1]), PaneWidth)
	}
	got, err := ParsePytest(pane)
	if err != nil {
		t.Fatal(err)
	}
	// The wrapped line has no " - " left, so the name is cut at column 160,
	// as Terminal-Bench reads the tmux pane.
	want := strings.TrimPrefix(lines[1], "FAILED tests/test_outputs.py::")
	if got[want] != Failed || len(got) != 1 {
		t.Errorf("got %v, want {%s: failed}", got, want)
	}
}

func TestParseSWEBench(t *testing.T) {
	got, err := ParseSWEBench("x\nSWEBench results starts here\nPASSED\nSWEBench results ends here\n")
	if err != nil || got["tests"] != Passed {
		t.Errorf("got %v %v", got, err)
	}
	got, err = ParseSWEBench("SWEBench results starts here\nFAILED\nSWEBench results ends here")
	if err != nil || got["tests"] != Failed {
		t.Errorf("got %v %v", got, err)
	}
	if _, err := ParseSWEBench("PASSED"); err == nil {
		t.Error("missing markers must be a parse error")
	}
	// SWEBenchParser: the block runs from the first start marker to the
	// last end marker after it (the rest of the output when there is
	// none), and an end marker anywhere counts as present.
	for in, want := range map[string]Status{
		"SWEBench results starts here\nPASSED\nSWEBench results ends here\nFAILED\nSWEBench results ends here": Failed,
		"SWEBench results ends here\nSWEBench results starts here\nPASSED\n":                                   Passed,
		"SWEBench results starts here\n\u00a0PASSED\x1c\nSWEBench results ends here":                           Passed,
	} {
		if got, err := ParseSWEBench(in); err != nil || got["tests"] != want {
			t.Errorf("%q: got %v %v, want %s", in, got, err, want)
		}
	}
}

// TestParsePytestPythonWhitespace: split() and strip() are Python's, for
// which \x1c-\x1f and Unicode spaces are whitespace, in the header too.
func TestParsePytestPythonWhitespace(t *testing.T) {
	got, err := ParsePytest("==\u00a0short test summary info\x1f==\nPASSED\x1ft.py::a\nFAILED\u2003t.py::b\x1f\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]Status{"a": Passed, "b": Failed}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

package swebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/checker"
	"evals.si/sandbox"
)

// ParserGrade is the registered name of the SWE-bench grader.
const ParserGrade = "evalsi_swebench:grade"

// RegisterParsers adds the SWE-bench grader to reg.
func RegisterParsers(reg *checker.Registry) {
	reg.Register(ParserGrade, gradeVerdict)
}

// gradeVerdict reads the grading line the checker script printed first,
// then grades the rest of the output (the harness's test_output.txt).
func gradeVerdict(_ context.Context, res sandbox.ExecResult, _ checker.Sandbox, _ string) (checker.Verdict, error) {
	out := res.Stdout
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	line, ok := bytes.CutPrefix(first, []byte(gradeMarker))
	if !ok {
		return checker.Verdict{}, &checker.InfraError{Reason: "the SWE-bench checker did not print its grading line first; output starts: " + string(first)}
	}
	var g Grade
	if err := json.Unmarshal(line, &g); err != nil {
		return checker.Verdict{}, &checker.InfraError{Reason: "decoding the SWE-bench grading line", Err: err}
	}
	log := string(rest) + string(res.Stderr)
	if res.Truncated {
		// The end marker may have been cut: say so rather than grade
		// silently against part of the log.
		log += "\n[evalsi: output truncated at the sandbox's output limit]\n"
	}
	r := EvalReport(g, log)
	v := checker.Verdict{Pass: r.Resolved, Details: details(r)}
	if r.Resolved {
		v.Score = 1
	}
	return v, nil
}

func details(r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", r.Status)
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", r.Reason)
	}
	if r.PatchSuccessfullyApplied {
		t := r.Tests
		fmt.Fprintf(&b, "; FAIL_TO_PASS %d/%d, PASS_TO_PASS %d/%d", len(t.F2PSuccess), len(t.F2PSuccess)+len(t.F2PFailure), len(t.P2PSuccess), len(t.P2PSuccess)+len(t.P2PFailure))
		for _, c := range t.F2PFailure {
			fmt.Fprintf(&b, "\nFAIL_TO_PASS failed: %s", c)
		}
		for _, c := range t.P2PFailure {
			fmt.Fprintf(&b, "\nPASS_TO_PASS failed: %s", c)
		}
	}
	return b.String()
}

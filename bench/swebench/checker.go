package swebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/checker"
	"evals.si/sandbox"
	"evals.si/spec"
)

// ParserGrade is the registered name of the SWE-bench grader.
const ParserGrade = "evalsi_swebench:grade"

// RegisterParsers adds the SWE-bench grader to reg.
func RegisterParsers(reg *checker.Registry) {
	reg.Register(ParserGrade, gradeVerdict)
}

// gradeVerdict reads the grading line the checker script printed first,
// then grades the rest of the output with the eval script's output (the
// harness's test_output.txt), read back from TestOutputPath.
func gradeVerdict(ctx context.Context, res sandbox.ExecResult, sb checker.Sandbox, _ string, _ spec.JSON) (checker.Verdict, error) {
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
	log := string(rest)
	if bytes.Contains(rest, []byte(testOutputMarker)) {
		out, err := readTestOutput(ctx, sb)
		if err != nil {
			return checker.Verdict{}, err
		}
		log += out
	}
	log += string(res.Stderr)
	if res.Truncated {
		// The checker's own lines were cut (a patch with enormous apply
		// output): say so rather than grade silently against part of it.
		log += "\n[evalsi: checker output truncated at the sandbox's output limit]\n"
	}
	r := EvalReport(g, log)
	v := checker.Verdict{Pass: r.Resolved, Details: details(r)}
	if r.Resolved {
		v.Score = 1
	}
	return v, nil
}

// readTestOutput reads TestOutputPath, up to LogCap. cat runs in the
// sandbox with the cap as its output limit, so an enormous log never
// reaches the engine's memory whole.
func readTestOutput(ctx context.Context, sb checker.Sandbox) (string, error) {
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"cat", "--", TestOutputPath}, OutputLimit: LogCap})
	if err != nil {
		return "", &checker.InfraError{Reason: "reading the SWE-bench test output " + TestOutputPath, Err: err}
	}
	if res.ExitCode != 0 {
		return "", &checker.InfraError{Reason: fmt.Sprintf("reading the SWE-bench test output %s: cat exited %d: %s", TestOutputPath, res.ExitCode, bytes.TrimSpace(res.Stderr))}
	}
	out := string(res.Stdout)
	if res.Truncated {
		out += fmt.Sprintf("\n[evalsi: test output cut at %d bytes]\n", LogCap)
	}
	return out, nil
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

package swebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// gradeVerdict grades the fresh sandbox's run of checkerScript as
// get_eval_report does. What it trusts: the record's grading data (args),
// the script's exit code, set before any of the agent's code ran, and the
// eval script's output in TestOutputPath. Nothing the command printed is
// read: the apply output carries the agent's file names.
func gradeVerdict(ctx context.Context, res sandbox.ExecResult, sb checker.Sandbox, _ string, args spec.JSON) (checker.Verdict, error) {
	g, err := decodeGrade(args)
	if err != nil {
		return checker.Verdict{}, &checker.InfraError{Reason: "reading the SWE-bench grading data from checker.parser_args", Err: err}
	}
	switch res.ExitCode {
	case exitEvaluated:
	case exitEmptyPatch:
		// run_instances drops empty predictions: never evaluated, unresolved.
		return checker.Verdict{Details: ResolvedNo + ": the agent's patch is empty (the harness does not evaluate an empty patch)"}, nil
	case exitApplyFailed:
		return checker.Verdict{Details: ResolvedNo + ": " + ApplyPatchFail + ": no command of the harness applied the agent's patch"}, nil
	case exitTimedOut:
		return checker.Verdict{Details: fmt.Sprintf("%s: %s: the eval script ran past %s", ResolvedNo, TestsTimeout, EvalTimeout)}, nil
	case exitNoPatchFile:
		return checker.Verdict{}, &checker.InfraError{Reason: "the fresh checker sandbox has no patch file at " + PatchPath + ": the engine must write the agent's diff to checker.patch_file"}
	case exitNoWorkdir:
		return checker.Verdict{}, &checker.InfraError{Reason: "the SWE-bench environment has no " + Workdir + ": is the image an instance image?"}
	default:
		return checker.Verdict{}, &checker.InfraError{Reason: fmt.Sprintf("the SWE-bench checker script exited %d (want one of its own codes); stderr: %s", res.ExitCode, snippet(res.Stderr))}
	}
	log, err := readTestOutput(ctx, sb)
	if err != nil {
		return checker.Verdict{}, err
	}
	r := EvalReport(g, log)
	v := checker.Verdict{Pass: r.Resolved, Details: details(r)}
	if r.Resolved {
		v.Score = 1
	}
	return v, nil
}

// gradeArgs is the record's checker.parser_args: what get_eval_report
// takes from the test spec. Lists are never null, so a record says
// outright when one is empty.
func gradeArgs(g Grade) spec.JSON {
	if g.FailToPass == nil {
		g.FailToPass = []string{}
	}
	if g.PassToPass == nil {
		g.PassToPass = []string{}
	}
	b, err := json.Marshal(g)
	if err != nil {
		panic(fmt.Sprintf("swebench: encoding grading data: %v", err)) // strings only
	}
	return b
}

// decodeGrade reads gradeArgs back, strictly: a record missing a test
// list or naming an unknown parser or eval type is broken, which is an
// error rather than a grade (an absent list would grade as empty).
func decodeGrade(args spec.JSON) (Grade, error) {
	var a struct {
		InstanceID string    `json:"instance_id"`
		FailToPass *[]string `json:"FAIL_TO_PASS"`
		PassToPass *[]string `json:"PASS_TO_PASS"`
		LogParser  string    `json:"log_parser"`
		EvalType   string    `json:"eval_type"`
		Version    string    `json:"version"`
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.DisallowUnknownFields()
	if err := d.Decode(&a); err != nil {
		return Grade{}, fmt.Errorf("want {instance_id, FAIL_TO_PASS, PASS_TO_PASS, log_parser, eval_type} (re-import the dataset): %w", err)
	}
	switch {
	case a.InstanceID == "":
		return Grade{}, errors.New("instance_id is missing (re-import the dataset)")
	case a.FailToPass == nil || a.PassToPass == nil:
		return Grade{}, fmt.Errorf("instance %s: FAIL_TO_PASS and PASS_TO_PASS must both be lists (re-import the dataset)", a.InstanceID)
	case a.EvalType != EvalPassAndFail && a.EvalType != EvalFailOnly:
		return Grade{}, fmt.Errorf("instance %s: eval_type %q is neither %s nor %s", a.InstanceID, a.EvalType, EvalPassAndFail, EvalFailOnly)
	}
	if _, err := ParserForInstance(a.LogParser, a.InstanceID, a.Version); err != nil {
		return Grade{}, fmt.Errorf("instance %s: log_parser: %w", a.InstanceID, err)
	}
	return Grade{InstanceID: a.InstanceID, FailToPass: *a.FailToPass, PassToPass: *a.PassToPass, LogParser: a.LogParser, EvalType: a.EvalType, Version: a.Version}, nil
}

func snippet(b []byte) string {
	const max = 2000
	b = bytes.TrimSpace(b)
	if len(b) > max {
		return "…" + string(b[len(b)-max:])
	}
	return string(b)
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

package swebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

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
// get_eval_report does. What it trusts: the record's grading data (args)
// and the script's exit codes that are set before any of the agent's code
// runs (no workdir, no patch file, empty patch, patch not applied). Once
// the eval script runs, the agent's code runs with it (the patched repo's
// tests), so whatever ends that phase, an exit code of the script's own or
// one its tests caused, and whatever is in TestOutputPath, is graded from
// the log: the agent cannot turn its failure into an infrastructure error.
// Nothing the command printed is read: the apply output carries the
// agent's file names.
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
		return checker.Verdict{}, &checker.InfraError{Cause: checker.CauseSandbox, Reason: "the fresh checker sandbox has no patch file at " + PatchPath + ": the engine must write the agent's diff to checker.patch_file"}
	case exitNoWorkdir:
		return checker.Verdict{}, &checker.InfraError{Cause: checker.CauseSandbox, Reason: "the SWE-bench environment has no " + Workdir + ": is the image an instance image?"}
	}
	// exitEvaluated, or the eval phase ended otherwise (its tests killed
	// the script, say): the log decides.
	log := readTestOutput(ctx, sb)
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

// readTestOutput reads TestOutputPath with the rung's own file
// operation (no binary of the image runs), or, for a log past its read
// cap, with cat bounded by LogCap and a timeout. The agent's code ran
// before it and may have removed, replaced or grown the file: whatever
// cannot be read is a log without markers, which grades unresolved,
// never an infrastructure error.
func readTestOutput(ctx context.Context, sb checker.Sandbox) string {
	b, err := sb.ReadFile(ctx, TestOutputPath)
	if err == nil {
		return string(b)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("\n[evalsi: no test output at %s]\n", TestOutputPath)
	}
	res, cerr := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"cat", "--", TestOutputPath}, OutputLimit: LogCap, Timeout: 2 * time.Minute})
	if cerr != nil || res.ExitCode != 0 || res.TimedOut {
		return fmt.Sprintf("\n[evalsi: the test output %s could not be read: %v; cat: exit %d %v %s]\n", TestOutputPath, err, res.ExitCode, cerr, bytes.TrimSpace(res.Stderr))
	}
	out := string(res.Stdout)
	if res.Truncated {
		out += fmt.Sprintf("\n[evalsi: test output cut at %d bytes]\n", LogCap)
	}
	return out
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

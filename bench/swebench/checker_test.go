package swebench

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"evals.si/checker"
	"evals.si/sandbox"
	"evals.si/spec"
)

// The grader takes the test lists from the record's parser_args only, and
// refuses a record that does not carry them whole: a missing list would
// otherwise grade as an empty one, which resolves.
func TestGradeArgs(t *testing.T) {
	g, err := decodeGrade(gradeArgs(Grade{InstanceID: "a__b-1", LogParser: "parse_log_pytest", EvalType: EvalPassAndFail}))
	if err != nil || g.FailToPass == nil || g.PassToPass == nil || len(g.FailToPass)+len(g.PassToPass) != 0 {
		t.Errorf("empty lists round trip: %+v %v", g, err)
	}
	for _, tc := range []struct {
		name, args, want string
	}{
		{"none", ``, "want {instance_id"},
		{"no FAIL_TO_PASS", `{"instance_id":"a__b-1","PASS_TO_PASS":[],"log_parser":"parse_log_pytest","eval_type":"pass_and_fail"}`, "must both be lists"},
		{"null PASS_TO_PASS", `{"instance_id":"a__b-1","FAIL_TO_PASS":["t"],"PASS_TO_PASS":null,"log_parser":"parse_log_pytest","eval_type":"pass_and_fail"}`, "must both be lists"},
		{"no instance", `{"FAIL_TO_PASS":[],"PASS_TO_PASS":[],"log_parser":"parse_log_pytest","eval_type":"pass_and_fail"}`, "instance_id is missing"},
		{"unknown parser", `{"instance_id":"a__b-1","FAIL_TO_PASS":[],"PASS_TO_PASS":[],"log_parser":"parse_log_nope","eval_type":"pass_and_fail"}`, "log_parser"},
		{"unknown eval type", `{"instance_id":"a__b-1","FAIL_TO_PASS":[],"PASS_TO_PASS":[],"log_parser":"parse_log_pytest","eval_type":"all"}`, "eval_type"},
		{"unknown field", `{"instance_id":"a__b-1","FAIL_TO_PASS":[],"PASS_TO_PASS":[],"log_parser":"parse_log_pytest","eval_type":"pass_and_fail","resolved":true}`, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeGrade(spec.JSON(tc.args))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// The script's exit code, set before any of the agent's code runs, says
// whether there is a log to grade; only an evaluated run reads one.
func TestGradeByExitCode(t *testing.T) {
	args := gradeArgs(Grade{InstanceID: "a__b-1", FailToPass: []string{"t"}, LogParser: "parse_log_pytest", EvalType: EvalPassAndFail})
	for _, tc := range []struct {
		code  int
		want  string
		infra bool
	}{
		{exitEmptyPatch, "patch is empty", false},
		{exitApplyFailed, ApplyPatchFail, false},
		{exitTimedOut, TestsTimeout, false},
		{exitNoPatchFile, "no patch file", true},
		{exitNoWorkdir, "has no /testbed", true},
	} {
		// No sandbox: these codes must be graded without reading one.
		v, err := gradeVerdict(context.Background(), sandbox.ExecResult{ExitCode: tc.code}, nil, Workdir, args)
		var ie *checker.InfraError
		switch {
		case tc.infra && (!errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("exit %d: err %v, want an InfraError saying %q", tc.code, err, tc.want)
		case !tc.infra && (err != nil || v.Pass || v.Score != 0 || !strings.Contains(v.Details, tc.want)):
			t.Errorf("exit %d: %+v %v, want unresolved with %q", tc.code, v, err, tc.want)
		}
	}
	// Codes the eval phase ended with (its tests may kill the script) are
	// graded from whatever log there is, never an infrastructure error.
	for _, code := range []int{1, 137} {
		v, err := gradeVerdict(context.Background(), sandbox.ExecResult{ExitCode: code}, noLog{}, Workdir, args)
		if err != nil || v.Pass || !strings.Contains(v.Details, "markers are missing") {
			t.Errorf("exit %d with no log: %+v %v, want unresolved for missing markers", code, v, err)
		}
	}
	if _, err := gradeVerdict(context.Background(), sandbox.ExecResult{}, nil, Workdir, nil); err == nil {
		t.Error("a record without parser_args graded")
	}
}

// noLog is a checker sandbox whose test output is gone: what the agent's
// tests can leave in the fresh sandbox.
type noLog struct{}

func (noLog) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{ExitCode: 1}, nil
}
func (noLog) ReadFile(context.Context, string) ([]byte, error) { return nil, fs.ErrNotExist }
func (noLog) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return errors.New("read-only")
}

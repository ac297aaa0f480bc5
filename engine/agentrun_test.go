package engine

import (
	"context"
	"testing"

	"evals.si/sandbox"
)

// limitSandbox records the output limit of each command it is asked to run.
type limitSandbox struct {
	sandbox.Sandbox
	got int
}

func (s *limitSandbox) Exec(_ context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	s.got = req.OutputLimit
	return sandbox.ExecResult{}, nil
}

// Commands that set no output limit (the checker's, other agents') get the
// run's caps.command_output_kb; those that set one keep it.
func TestCappedSandboxFillsTheRunsOutputLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req, want int
	}{
		{"unset gets the run's", 0, 256 << 10},
		{"a smaller one is kept", 4 << 10, 4 << 10},
		{"a larger one is kept (diff capture, CLI agent)", 32 << 20, 32 << 20},
	} {
		inner := &limitSandbox{}
		sb := cappedSandbox{Sandbox: inner, outputLimit: 256 << 10}
		if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"true"}, OutputLimit: tc.req}); err != nil {
			t.Fatal(err)
		}
		if inner.got != tc.want {
			t.Errorf("%s: the sandbox got limit %d, want %d", tc.name, inner.got, tc.want)
		}
	}
}

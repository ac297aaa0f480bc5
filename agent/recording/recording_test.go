package recording

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

func TestEscapeID(t *testing.T) {
	for in, want := range map[string]string{
		"fix-calc_2.v1": "fix-calc_2.v1",
		"a/b c":         "a%2Fb%20c",
		"..":            "%2E.",
		".hidden":       "%2Ehidden",
		"c:\\x*":        "c%3A%5Cx%2A",
		"é":             "%C3%A9",
		"":              "%",
	} {
		if got := EscapeID(in); got != want {
			t.Errorf("EscapeID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDiverge(t *testing.T) {
	zero, one := 0, 1
	base := trajectory.ToolResult{CallID: "c", Name: "bash", Output: "a\nb\n", ExitCode: &zero}
	for _, c := range []struct {
		name string
		got  trajectory.ToolResult
		want string
	}{
		{"same", base, ""},
		{"exit", trajectory.ToolResult{CallID: "c", Name: "bash", Output: "a\nb\n", ExitCode: &one}, "exit code 1, recorded 0"},
		{"output", trajectory.ToolResult{CallID: "c", Name: "bash", Output: "a\nc\n", ExitCode: &zero}, "output differs from line 2"},
		{"error", trajectory.ToolResult{CallID: "c", Name: "bash", Output: "a\nb\n", IsError: true}, "exit code none, recorded 0; is_error true, recorded false"},
	} {
		d := diverge(base, c.got)
		got := ""
		if d != nil {
			got = d.Summary
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// chatAgent makes n model calls, each followed by one tool result.
type chatAgent struct {
	conn model.Connector
	n    int
}

func (a chatAgent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	var out string
	for i := range a.n {
		resp, err := a.conn.Chat(ctx, model.Request{RecordID: t.RecordID, Trial: t.Trial,
			Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: fmt.Sprint("q", i)}}})
		if err != nil {
			return agent.Result{}, err
		}
		out = resp.Message.Content
		call := trajectory.ToolCall{ID: fmt.Sprint("c", i), Name: "bash"}
		if err := t.Emit.Emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: i + 1, ToolCall: &call}); err != nil {
			return agent.Result{}, err
		}
		if err := t.Emit.Emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: i + 1,
			ToolResult: &trajectory.ToolResult{CallID: call.ID, Name: "bash", Output: out}}); err != nil {
			return agent.Result{}, err
		}
	}
	return agent.Result{Output: out}, nil
}

func TestPureReplayPastTheEndFails(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live, err := model.New(spec.ModelRef{Connector: "scripted", Script: &spec.Script{Default: []spec.ScriptReply{{Content: "r"}}}}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Open(spec.Recording{Mode: ModeRecord, Dir: dir}, dir, "unit")
	if err != nil {
		t.Fatal(err)
	}
	sink := trajectory.SinkFunc(func(trajectory.Event) error { return nil })
	task := agent.Task{RecordID: "r/1", Trial: 3, Emit: sink}
	if _, err := rec.Agent(chatAgent{rec.Connector(RoleAgent, live), 2}).Run(ctx, task); err != nil {
		t.Fatal(err)
	}

	play, err := Open(spec.Recording{Mode: ModeReplay, Dir: dir}, dir, "unit")
	if err != nil {
		t.Fatal(err)
	}
	_, err = play.Agent(chatAgent{play.Connector(RoleAgent, nil), 3}).Run(ctx, task)
	if err == nil || !strings.Contains(err.Error(), `recording has no agent model call 2 for record "r/1" trial 3`) {
		t.Errorf("replaying a third call of two: %v", err)
	}
	_, err = play.Agent(chatAgent{play.Connector(RoleAgent, nil), 1}).Run(ctx, agent.Task{RecordID: "r/1", Trial: 0, Emit: sink})
	if err == nil || !strings.Contains(err.Error(), `has no trial 0 of record "r/1"`) {
		t.Errorf("replaying an unrecorded trial: %v", err)
	}
}

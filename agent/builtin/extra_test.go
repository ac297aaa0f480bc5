package builtin

import (
	"strings"
	"testing"

	"evals.si/agent/tools"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

func mockTool(t *testing.T, name, response string) *tools.Mock {
	t.Helper()
	m, err := tools.NewMock("harness.builtin.tools.mocks[0]", spec.MockTool{Name: name, Response: spec.JSON(response)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Added tools are offered to the model and run in the loop; a call of a
// tool that does not exist is told every tool there is.
func TestAddedTools(t *testing.T) {
	sb := newSandbox(t)
	rec := &recorder{}
	conn := &scripted{replies: []model.Response{
		toolReply(u100, call("c1", "weather", `{"city":"Paris"}`), call("c2", "wether", `{}`)),
		answer("done", u100),
	}}
	a := New(conn, "m", spec.Builtin{}, nil, nil)
	if err := a.AddTools(mockTool(t, "weather", `"rain"`)); err != nil {
		t.Fatal(err)
	}
	if err := a.AddTools(mockTool(t, "weather", `"sun"`)); err == nil || !strings.Contains(err.Error(), "clashes") {
		t.Errorf("a second weather tool: %v", err)
	}
	if err := a.AddTools(mockTool(t, ToolReadFile, `"x"`)); err == nil || !strings.Contains(err.Error(), "built-in agent's own") {
		t.Errorf("a mock named read_file: %v", err)
	}
	if _, err := a.Run(t.Context(), task(sb, rec)); err != nil {
		t.Fatal(err)
	}
	var offered []string
	for _, tool := range conn.reqs[0].Tools {
		offered = append(offered, tool.Name)
	}
	if strings.Join(offered, ",") != "bash,read_file,write_file,request_escalation,weather" {
		t.Errorf("tools offered: %v", offered)
	}
	results := rec.of(trajectory.KindToolResult)
	if len(results) != 2 {
		t.Fatalf("%d results", len(results))
	}
	if r := results[0].ToolResult; r.Output != "rain" || r.IsError || r.CallID != "c1" {
		t.Errorf("weather: %+v", r)
	}
	if r := results[1].ToolResult; !r.IsError || !strings.Contains(r.Output, "weather") || r.Fault != "" {
		t.Errorf("unknown tool: %+v", r)
	}
}

// In prompted mode the added tools are listed in the system prompt.
func TestAddedToolsPrompted(t *testing.T) {
	sb := newSandbox(t)
	conn := &scripted{replies: []model.Response{
		answer(`<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>`, u100),
		answer("done", u100),
	}}
	a := New(conn, "m", spec.Builtin{ToolCallMode: "prompted", ToolCallFormat: "tool_call_tags"}, nil, nil)
	if err := a.AddTools(mockTool(t, "weather", `"snow"`)); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if _, err := a.Run(t.Context(), task(sb, rec)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(conn.reqs[0].System, "weather") {
		t.Errorf("the system prompt does not list the weather tool:\n%s", conn.reqs[0].System)
	}
	if rs := rec.of(trajectory.KindToolResult); len(rs) != 1 || rs[0].ToolResult.Output != "snow" {
		t.Errorf("results %+v", rs)
	}
	if !strings.Contains(conn.reqs[1].Messages[len(conn.reqs[1].Messages)-1].Content, "snow") {
		t.Error("the result did not go back to the model")
	}
}

// Faults replace or corrupt calls and are marked; an error fault on bash
// means the command never runs.
func TestFaultsInLoop(t *testing.T) {
	sb := newSandbox(t)
	rec := &recorder{}
	conn := &scripted{replies: []model.Response{
		toolReply(u100,
			call("c1", "bash", `{"command":"touch ran.txt"}`),
			call("c2", "weather", `{}`),
			call("c3", "read_file", `{"path":"missing.txt"}`),
			call("c4", "nosuchtool", `{}`)),
		answer("done", u100),
	}}
	a := New(conn, "m", spec.Builtin{}, nil, nil)
	if err := a.AddTools(mockTool(t, "weather", `"rain and wind"`)); err != nil {
		t.Fatal(err)
	}
	f, err := tools.NewFaults("faults-test", []spec.Fault{
		{Tool: "bash", Kind: "error", Rate: 1},
		{Tool: "weather", Kind: "malformed", Rate: 1},
		{Tool: "*", Kind: "timeout", Rate: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetFaults(f); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(t.Context(), task(sb, rec)); err != nil {
		t.Fatal(err)
	}
	rs := rec.of(trajectory.KindToolResult)
	if len(rs) != 4 {
		t.Fatalf("%d results", len(rs))
	}
	want := []struct{ fault, output string }{
		{"error", "error: tool bash failed: injected error"},
		{"malformed", `{"output":"rain a`},
		{"timeout", "error: tool read_file timed out before returning a result"},
		{"", `unknown tool "nosuchtool"`},
	}
	for i, w := range want {
		r := rs[i].ToolResult
		if r.Fault != w.fault || !strings.HasPrefix(r.Output, w.output) {
			t.Errorf("result %d: fault %q output %q, want %q %q", i, r.Fault, r.Output, w.fault, w.output)
		}
	}
	if _, err := sb.ReadFile(t.Context(), testWorkdir+"/ran.txt"); err == nil {
		t.Error("bash ran although an error fault replaced it")
	}
	bad, _ := tools.NewFaults("x", []spec.Fault{{Tool: "wether", Kind: "error", Rate: 1}})
	if err := a.SetFaults(bad); err == nil || !strings.Contains(err.Error(), "weather") {
		t.Errorf("a fault for a tool that does not exist: %v", err)
	}
}

package builtin

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// In prompted mode the loop reads calls from the text only: a structured
// call the endpoint returns anyway is ignored, a python block is inert, an
// unreadable call is reported back and recorded without running, and the
// results go back as one user message.
func TestPromptedLoop(t *testing.T) {
	sb := newSandbox(t)
	rec := &recorder{}
	stray := answer("<tool_call>echo one > a.txt</tool_call>\n```python\nopen('b.txt', 'w').write('x')\n```\n<tool_call>{\"name\": \"bash\", \"arguments\": </tool_call>", u100)
	stray.Message.ToolCalls = []trajectory.ToolCall{call("c9", "bash", map[string]string{"command": "echo stray > c.txt"})}
	conn := &scripted{replies: []model.Response{
		stray,
		answer("<tool_call>ls</tool_call><|im_end|>", u100),
		answer("Done.", u100),
	}}
	a := New(conn, "m", spec.Builtin{ToolCallMode: "prompted"}, nil, nil)
	res, err := a.Run(t.Context(), task(sb, rec))
	if err != nil || res.StopReason != "answered" || res.Steps != 3 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	for i, req := range conn.reqs {
		if len(req.Tools) != 0 {
			t.Errorf("request %d sent %d tools in prompted mode", i+1, len(req.Tools))
		}
		if !strings.Contains(req.System, "<tool_call>") {
			t.Errorf("request %d: system prompt does not state the protocol", i+1)
		}
	}
	calls := rec.of(trajectory.KindToolCall)
	if len(calls) != 2 || !strings.Contains(string(calls[0].ToolCall.Arguments), "echo one") || calls[0].ToolCall.ID != "call_1_0" {
		t.Fatalf("tool calls = %+v", calls)
	}
	logs := rec.of(trajectory.KindLog)
	if len(logs) != 2 || !strings.Contains(logs[0].Log.Text, "prompted tool_call_tags") || !strings.Contains(logs[1].Log.Text, "unreadable tool call") {
		t.Errorf("log events = %+v", logs)
	}
	out, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"ls"}, Workdir: testWorkdir})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out.Stdout)); strings.Join(got, ",") != "a.txt" {
		t.Errorf("workdir holds %v, want only a.txt (the python block and the structured call must not run)", got)
	}
	// Step 2 saw: assistant text (no structured calls), then one user
	// message with the result and the problem.
	msgs := conn.reqs[1].Messages
	asst, user := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if asst.Role != trajectory.RoleAssistant || len(asst.ToolCalls) != 0 || !strings.HasPrefix(asst.Content, "<tool_call>echo one") {
		t.Errorf("assistant message sent back = %+v", asst)
	}
	if user.Role != trajectory.RoleUser || !strings.Contains(user.Content, `<tool_result name="bash" id="call_1_0">`) ||
		!strings.Contains(user.Content, "could not be read and were not run") {
		t.Errorf("results message = %+v", user)
	}
}

// fenced_shell offers bash only, and its system prompt says so.
func TestPromptedFencedOffersBashOnly(t *testing.T) {
	sb := newSandbox(t)
	conn := &scripted{replies: []model.Response{answer("```bash\ntrue\n```", u100), answer("ok", u100)}}
	if _, err := New(conn, "m", spec.Builtin{ToolCallFormat: "fenced_shell"}, nil, nil).Run(t.Context(), task(sb, &recorder{})); err != nil {
		t.Fatal(err)
	}
	sys := conn.reqs[0].System
	if !strings.Contains(sys, "```bash") || strings.Contains(sys, "- read_file:") || !strings.Contains(sys, "- bash:") {
		t.Errorf("fenced system prompt:\n%s", sys)
	}
}

// In native mode a reply without structured calls whose text is a native
// call (a server that did not parse the model's format) is run.
func TestNativeReadsCallsLeftInText(t *testing.T) {
	sb := newSandbox(t)
	rec := &recorder{}
	conn := &scripted{replies: []model.Response{
		answer(`<|python_tag|>{"name": "bash", "parameters": {"command": "echo hi > n.txt"}}<|eom_id|>`, u100),
		answer("Written.", u100),
	}}
	res, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), task(sb, rec))
	if err != nil || res.Steps != 2 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if len(conn.reqs[0].Tools) != 4 {
		t.Errorf("native mode sent %d tools", len(conn.reqs[0].Tools))
	}
	msgs := conn.reqs[1].Messages
	if m := msgs[len(msgs)-1]; m.Role != trajectory.RoleTool || m.ToolCallID != "call_1_0" {
		t.Errorf("result went back as %+v, want a tool message", m)
	}
	if data, err := sb.ReadFile(t.Context(), "n.txt"); err != nil || string(data) != "hi\n" {
		t.Errorf("n.txt = %q, %v", data, err)
	}
}

// probeConn answers the native tool probe per its mode and counts probes.
type probeConn struct {
	scripted
	probeErr error
	probes   atomic.Int32
}

func (p *probeConn) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	if len(req.Tools) == 1 && req.Tools[0].Name == model.ProbeTool {
		p.probes.Add(1)
		if p.probeErr != nil {
			return model.Response{}, p.probeErr
		}
		return answer("I cannot call tools.", u100), nil
	}
	return p.scripted.Chat(ctx, req)
}

// auto probes once per Agent and keeps the answer; forcing native where the
// probe finds no support fails before any step.
func TestModeResolutionInTheAgent(t *testing.T) {
	sb := newSandbox(t)
	conn := &probeConn{scripted: scripted{replies: []model.Response{answer("<tool_call>true</tool_call>", u100), answer("ok", u100)}}}
	a := New(conn, "m", spec.Builtin{ToolCallMode: "auto"}, nil, nil)
	for range 2 {
		if _, err := a.Run(t.Context(), task(sb, &recorder{})); err != nil {
			t.Fatal(err)
		}
	}
	if n := conn.probes.Load(); n != 1 {
		t.Errorf("%d probes for two runs, want 1", n)
	}
	if p, _ := a.Protocol(t.Context()); p.Mode != "prompted" || p.Format != "tool_call_tags" {
		t.Errorf("protocol = %+v", p)
	}

	native := &probeConn{scripted: scripted{replies: []model.Response{answer("ok", u100)}}}
	rec := &recorder{}
	_, err := New(native, "m", spec.Builtin{ToolCallMode: "native"}, nil, nil).Run(t.Context(), task(sb, rec))
	if err == nil || !strings.Contains(err.Error(), "does not support native tool calls") {
		t.Fatalf("err = %v, want the fail-closed error", err)
	}
	if len(native.reqs) != 0 || len(rec.of(trajectory.KindModelCall)) != 0 {
		t.Errorf("a step ran after the failed resolution")
	}

	broken := &probeConn{probeErr: errors.New("connection refused")}
	if _, err := New(broken, "m", spec.Builtin{ToolCallMode: "auto"}, nil, nil).Run(t.Context(), task(sb, &recorder{})); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("err = %v, want the probe's failure", err)
	}
}

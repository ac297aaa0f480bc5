package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const testWorkdir = "/work/task"

// newSandbox returns a real bubblewrap sandbox over the host's system
// directories, closed at the end of the test.
func newSandbox(t *testing.T) sandbox.Sandbox { return bwraptest.New(t, testWorkdir) }

// scripted stands in for the model provider only: it returns its replies
// in order (the last one repeats) and keeps every request.
type scripted struct {
	mu      sync.Mutex
	replies []model.Response
	reqs    []model.Request
}

func (s *scripted) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Messages = append([]trajectory.Message(nil), req.Messages...)
	s.reqs = append(s.reqs, req)
	i := min(len(s.reqs)-1, len(s.replies)-1)
	return s.replies[i], ctx.Err()
}

func toolReply(usage trajectory.Usage, calls ...trajectory.ToolCall) model.Response {
	return model.Response{Message: trajectory.Message{Role: trajectory.RoleAssistant, ToolCalls: calls},
		Usage: usage, StopReason: "tool_use", Model: "test-model"}
}

func answer(text string, usage trajectory.Usage) model.Response {
	return model.Response{Message: trajectory.Message{Role: trajectory.RoleAssistant, Content: text},
		Usage: usage, StopReason: "end_turn", Model: "test-model"}
}

func call(id, name string, args any) trajectory.ToolCall {
	raw, ok := args.(string)
	if !ok {
		b, _ := json.Marshal(args)
		raw = string(b)
	}
	return trajectory.ToolCall{ID: id, Name: name, Arguments: json.RawMessage(raw)}
}

// recorder is the event sink: it keeps events in order.
type recorder struct {
	mu     sync.Mutex
	events []trajectory.Event
}

func (r *recorder) Emit(e trajectory.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) of(kind trajectory.Kind) []trajectory.Event {
	var out []trajectory.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) sequence() string {
	var parts []string
	for _, e := range r.events {
		s := fmt.Sprintf("%d:%s", e.Step, e.Kind)
		if e.Message != nil {
			s += "/" + e.Message.Role
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func task(sb sandbox.Sandbox, rec *recorder) agent.Task {
	return agent.Task{RecordID: "rec-1", Instruction: "Fix the bug in calc.py.", Sandbox: sb,
		Workdir: testWorkdir, CommandTimeout: 30 * time.Second, Emit: rec}
}

var u100 = trajectory.Usage{InputTokens: 100, OutputTokens: 50}

func TestTwoStepFix(t *testing.T) {
	sb := newSandbox(t)
	if err := sb.WriteFile(t.Context(), testWorkdir+"/calc.py", []byte("def add(a, b):\n    return a - b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn := &scripted{replies: []model.Response{
		toolReply(u100, call("c1", "read_file", map[string]string{"path": "calc.py"})),
		toolReply(u100, call("c2", "write_file", map[string]string{"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})),
		toolReply(u100, call("c3", "bash", map[string]string{"command": "python3 -c 'import calc; print(calc.add(2, 3))'; echo warn >&2"})),
		answer("Fixed add: it subtracted.", u100),
	}}
	rec := &recorder{}
	a := New(conn, "test-model", spec.Builtin{Instructions: "Keep changes minimal."}, nil, nil)
	res, err := a.Run(t.Context(), task(sb, rec))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := agent.Result{Output: "Fixed add: it subtracted.", Usage: trajectory.Usage{InputTokens: 400, OutputTokens: 200},
		Steps: 4, StopReason: agent.StopAnswered}
	if res != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	got, err := sb.ReadFile(t.Context(), testWorkdir+"/calc.py")
	if err != nil || string(got) != "def add(a, b):\n    return a + b\n" {
		t.Errorf("calc.py after the run = %q, %v", got, err)
	}

	wantSeq := "0:message/system 0:message/user" +
		" 1:model_call 1:message/assistant 1:tool_call 1:tool_result" +
		" 2:model_call 2:message/assistant 2:tool_call 2:tool_result" +
		" 3:model_call 3:message/assistant 3:tool_call 3:tool_result" +
		" 4:model_call 4:message/assistant 4:stop"
	if s := rec.sequence(); s != wantSeq {
		t.Errorf("event sequence:\n got %s\nwant %s", s, wantSeq)
	}
	results := rec.of(trajectory.KindToolResult)
	if r := results[0].ToolResult; r.IsError || r.Output != "def add(a, b):\n    return a - b\n" {
		t.Errorf("read_file result = %+v", r)
	}
	if r := results[1].ToolResult; r.IsError || !strings.Contains(r.Output, "wrote 32 bytes to /work/task/calc.py") {
		t.Errorf("write_file result = %+v", r)
	}
	bash := results[2].ToolResult
	if bash.IsError || bash.ExitCode == nil || *bash.ExitCode != 0 || bash.CallID != "c3" ||
		bash.Output != "exit code: 0\nstdout:\n5\nstderr:\nwarn\n" {
		t.Errorf("bash result = %+v (output %q)", bash, bash.Output)
	}
	mc := rec.of(trajectory.KindModelCall)[0].ModelCall
	if mc.Model != "test-model" || mc.Usage != u100 || mc.StopReason != "tool_use" || mc.Role != "agent" {
		t.Errorf("model call event = %+v", mc)
	}
	if stop := rec.of(trajectory.KindStop)[0]; stop.Step != 4 || stop.Stop.Reason != agent.StopAnswered {
		t.Errorf("stop event = %+v", stop)
	}
	for _, e := range rec.events {
		if e.Time.IsZero() {
			t.Errorf("event %s has no time", e.Kind)
		}
	}

	// What the model saw: the system prompt with the workdir and the
	// instructions appended, the instruction, then each tool result linked
	// to its call.
	first := conn.reqs[0]
	if !strings.Contains(first.System, "Your working directory is /work/task") || !strings.HasSuffix(first.System, "\n\nKeep changes minimal.") {
		t.Errorf("system prompt:\n%s", first.System)
	}
	if first.Model != "test-model" || first.RecordID != "rec-1" || len(first.Tools) != 4 {
		t.Errorf("request = model %q record %q, %d tools", first.Model, first.RecordID, len(first.Tools))
	}
	last := conn.reqs[3].Messages
	if len(last) != 7 || last[0].Content != "Fix the bug in calc.py." || last[6].Role != trajectory.RoleTool || last[6].ToolCallID != "c3" || last[6].Name != "bash" {
		t.Errorf("conversation sent with the 4th call: %+v", last)
	}
	for _, tool := range first.Tools {
		var schema map[string]any
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("tool %s has a bad schema: %s", tool.Name, tool.Parameters)
		}
	}
}

func TestStopConditions(t *testing.T) {
	sb := newSandbox(t)
	loop := toolReply(trajectory.Usage{InputTokens: 100_000, OutputTokens: 10_000}, call("", "bash", map[string]string{"command": "echo step"}))
	tests := []struct {
		name    string
		cfg     spec.Builtin
		pricer  Pricer
		reason  string
		steps   int
		costUSD float64
	}{
		{"max_steps", spec.Builtin{MaxSteps: 2}, nil, agent.StopMaxSteps, 2, 0},
		{"default max_steps", spec.Builtin{}, nil, agent.StopMaxSteps, DefaultMaxSteps, 0},
		{"tokens", spec.Builtin{Budget: &spec.Budget{Tokens: 300_000}}, nil, agent.StopBudgetTokens, 3, 0},
		// $10 and $20 per million: $1.20 a call; the third call reaches $3.
		{"usd from spec pricing", spec.Builtin{Budget: &spec.Budget{USD: 3}, Pricing: map[string]spec.Price{"test-model": {Input: 10, Output: 20}}},
			tablePricer{"test-model": {Input: 1000, Output: 1000}}, agent.StopBudgetUSD, 3, 3.6},
		{"usd from the default table", spec.Builtin{Budget: &spec.Budget{USD: 2}},
			tablePricer{"test-model": {Input: 10, Output: 20}}, agent.StopBudgetUSD, 2, 2.4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := &scripted{replies: []model.Response{loop}}
			rec := &recorder{}
			res, err := New(conn, "test-model", tc.cfg, tc.pricer, nil).Run(t.Context(), task(sb, rec))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.StopReason != tc.reason || res.Steps != tc.steps || len(conn.reqs) != tc.steps {
				t.Errorf("stopped %q after %d steps (%d calls), want %q after %d", res.StopReason, res.Steps, len(conn.reqs), tc.reason, tc.steps)
			}
			if diff := res.CostUSD - tc.costUSD; diff > 1e-9 || diff < -1e-9 {
				t.Errorf("cost = %v, want %v", res.CostUSD, tc.costUSD)
			}
			stops := rec.of(trajectory.KindStop)
			if len(stops) != 1 || stops[0].Stop.Reason != tc.reason || stops[0].Step != tc.steps {
				t.Errorf("stop events = %+v", stops)
			}
			// The tool calls of the last, already paid-for response ran.
			if n := len(rec.of(trajectory.KindToolResult)); n != tc.steps {
				t.Errorf("%d tool results, want %d", n, tc.steps)
			}
			var costs float64
			for _, e := range rec.of(trajectory.KindModelCall) {
				costs += e.ModelCall.CostUSD
			}
			if diff := costs - res.CostUSD; diff > 1e-9 || diff < -1e-9 {
				t.Errorf("model call events cost %v in all, result says %v", costs, res.CostUSD)
			}
		})
	}
}

type tablePricer map[string]spec.Price

func (p tablePricer) Cost(model string, u trajectory.Usage) (float64, bool) {
	pr, ok := p[model]
	if !ok {
		return 0, false
	}
	return (float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output) / 1e6, true
}

func TestUSDBudgetWithoutPrice(t *testing.T) {
	sb := newSandbox(t)
	conn := &scripted{replies: []model.Response{answer("done", u100)}}
	_, err := New(conn, "unpriced-model", spec.Builtin{Budget: &spec.Budget{USD: 1}}, tablePricer{}, nil).Run(t.Context(), task(sb, &recorder{}))
	if err == nil || !strings.Contains(err.Error(), `no price is known for model "unpriced-model"`) {
		t.Fatalf("Run = %v, want an error naming the unpriced model", err)
	}
	if len(conn.reqs) != 0 {
		t.Error("the model was called although the budget cannot be enforced")
	}
}

func TestBadToolCallsAreToolErrors(t *testing.T) {
	sb := newSandbox(t)
	conn := &scripted{replies: []model.Response{
		toolReply(u100,
			call("a", "rm_rf", map[string]string{"path": "/"}),
			call("b", "bash", `{"command": "echo hi"`),
			call("c", "write_file", map[string]string{"path": "x.txt"}),
			call("d", "bash", `["echo"]`),
			call("e", "read_file", map[string]string{"path": "does/not/exist"}),
			call("", "bash", map[string]string{"command": "exit 4"}),
		),
		answer("gave up", u100),
	}}
	rec := &recorder{}
	res, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), task(sb, rec))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.StopReason != agent.StopAnswered || res.Steps != 2 {
		t.Errorf("result = %+v", res)
	}
	results := rec.of(trajectory.KindToolResult)
	want := []struct {
		isErr bool
		text  string
	}{
		{true, `unknown tool "rm_rf"`},
		{true, "not valid JSON"},
		{true, `"content" is required`},
		{true, "must be a JSON object"},
		{true, "reading /work/task/does/not/exist"},
		{false, "exit code: 4"},
	}
	if len(results) != len(want) {
		t.Fatalf("%d tool results, want %d", len(results), len(want))
	}
	for i, w := range want {
		r := results[i].ToolResult
		if r.IsError != w.isErr || !strings.Contains(r.Output, w.text) {
			t.Errorf("result %d = is_error %v %q, want is_error %v containing %q", i, r.IsError, r.Output, w.isErr, w.text)
		}
	}
	// The call without an ID got one, and its result answers it.
	if id := results[5].ToolResult.CallID; id != "call_1_5" {
		t.Errorf("generated call id = %q", id)
	}
	msgs := conn.reqs[1].Messages
	if got := msgs[len(msgs)-1]; got.ToolCallID != "call_1_5" || msgs[1].ToolCalls[5].ID != "call_1_5" {
		t.Errorf("tool message %+v does not answer the assistant's call %+v", got, msgs[1].ToolCalls[5])
	}
}

func TestEscalation(t *testing.T) {
	sb := newSandbox(t)
	tests := []struct {
		name     string
		escalate func(ctx context.Context, kind, reason string) (bool, error)
		granted  bool
		text     string
	}{
		{"denied", func(context.Context, string, string) (bool, error) { return false, nil }, false, "denied"},
		{"granted", func(context.Context, string, string) (bool, error) { return true, nil }, true, "granted: the sandbox policy now allows network"},
		{"no hook denies", nil, false, "denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			tk := task(sb, &recorder{})
			rec := tk.Emit.(*recorder)
			if tc.escalate != nil {
				tk.Escalate = func(ctx context.Context, kind, reason string) (bool, error) {
					asked = append(asked, kind+": "+reason)
					return tc.escalate(ctx, kind, reason)
				}
			}
			conn := &scripted{replies: []model.Response{
				toolReply(u100, call("e1", "request_escalation", map[string]string{"kind": "network", "reason": "pip install requests"})),
				answer("done", u100),
			}}
			if _, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), tk); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tc.escalate != nil && (len(asked) != 1 || asked[0] != "network: pip install requests") {
				t.Errorf("Escalate hook calls = %q", asked)
			}
			esc := rec.of(trajectory.KindEscalation)
			if len(esc) != 1 || esc[0].Step != 1 || *esc[0].Escalation != (trajectory.Escalation{Kind: "network", Reason: "pip install requests", Granted: tc.granted}) {
				t.Errorf("escalation events = %+v", esc)
			}
			r := rec.of(trajectory.KindToolResult)[0].ToolResult
			if !strings.HasPrefix(r.Output, tc.text) || r.IsError {
				t.Errorf("tool result = %+v, want it to start with %q", r, tc.text)
			}
		})
	}

	t.Run("hook error is an infra error", func(t *testing.T) {
		tk := task(sb, &recorder{})
		tk.Escalate = func(context.Context, string, string) (bool, error) { return false, errors.New("proxy unreachable") }
		conn := &scripted{replies: []model.Response{toolReply(u100, call("e1", "request_escalation", map[string]string{"kind": "network", "reason": "r"}))}}
		res, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), tk)
		if err == nil || !strings.Contains(err.Error(), "proxy unreachable") || res.StopReason != agent.StopError {
			t.Errorf("Run = %+v, %v", res, err)
		}
	})
}

func TestCommandTimeoutAndDenials(t *testing.T) {
	sb := newSandbox(t)
	tk := task(sb, &recorder{})
	rec := tk.Emit.(*recorder)
	tk.CommandTimeout = 300 * time.Millisecond
	conn := &scripted{replies: []model.Response{
		toolReply(u100, call("t", "bash", map[string]string{"command": "sleep 30"})),
		answer("done", u100),
	}}
	if _, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), tk); err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := rec.of(trajectory.KindToolResult)[0].ToolResult
	if !strings.Contains(r.Output, "[the command timed out after 300ms and was killed]") || !strings.HasPrefix(r.Output, "exit code: ") {
		t.Errorf("timed-out bash result:\n%s", r.Output)
	}
	pol := rec.of(trajectory.KindPolicy)
	if len(pol) != 1 || pol[0].Policy.Kind != "timeout" || pol[0].Step != 1 {
		t.Errorf("policy events = %+v", pol)
	}
}

func TestLongOutputIsShortened(t *testing.T) {
	sb := newSandbox(t)
	rec := &recorder{}
	conn := &scripted{replies: []model.Response{
		toolReply(u100, call("l", "bash", map[string]string{"command": "seq 1 20000"})),
		answer("done", u100),
	}}
	if _, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), task(sb, rec)); err != nil {
		t.Fatal(err)
	}
	r := rec.of(trajectory.KindToolResult)[0].ToolResult
	if !r.Truncated || !strings.Contains(r.Output, "bytes omitted") || !strings.HasPrefix(r.Output, "exit code: 0\nstdout:\n1\n2\n") || !strings.HasSuffix(r.Output, "19999\n20000\n") {
		t.Errorf("long output: truncated %v, %d bytes", r.Truncated, len(r.Output))
	}
}

// The bash tool's commands keep what the task's output limit allows
// (caps.command_output_kb), and the result names that limit when it cut.
func TestBashOutputLimit(t *testing.T) {
	sb := newSandbox(t)
	for _, tc := range []struct {
		name  string
		limit int
		want  string
	}{
		{"task limit cuts", 64 << 10, fmt.Sprintf("[stdout was cut by the sandbox at %d bytes]", 64<<10)},
		{"default limit keeps it all", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			tk := task(sb, rec)
			tk.OutputLimit = tc.limit
			conn := &scripted{replies: []model.Response{
				toolReply(u100, call("b", "bash", map[string]string{"command": "head -c 204800 /dev/zero | tr '\\0' x"})),
				answer("done", u100),
			}}
			if _, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), tk); err != nil {
				t.Fatal(err)
			}
			out := rec.of(trajectory.KindToolResult)[0].ToolResult.Output
			kept := 204800
			if tc.limit > 0 {
				kept = tc.limit
			}
			omitted := fmt.Sprintf("[... %d bytes omitted ...]", kept-streamHead-streamTail)
			if !strings.Contains(out, omitted) || (tc.want != "") != strings.Contains(out, "was cut by the sandbox") || !strings.Contains(out, tc.want) {
				t.Errorf("bash result does not say %q and %q:\n%s", omitted, tc.want, out)
			}
		})
	}
}

func TestInfraErrors(t *testing.T) {
	t.Run("broken sandbox", func(t *testing.T) {
		sb := newSandbox(t)
		if err := sb.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		conn := &scripted{replies: []model.Response{toolReply(u100, call("x", "bash", map[string]string{"command": "true"}))}}
		res, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), task(sb, rec))
		if err == nil || res.StopReason != agent.StopError {
			t.Fatalf("Run = %+v, %v; want an infra error", res, err)
		}
		if errs := rec.of(trajectory.KindError); len(errs) != 1 || errs[0].Error.Kind != "sandbox" {
			t.Errorf("error events = %+v", errs)
		}
	})
	t.Run("model error", func(t *testing.T) {
		sb := newSandbox(t)
		rec := &recorder{}
		conn := model.Connector(connFunc(func(context.Context, model.Request) (model.Response, error) {
			return model.Response{}, errors.New("529 overloaded after 4 retries")
		}))
		res, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), task(sb, rec))
		if err == nil || !strings.Contains(err.Error(), "529 overloaded") || res.StopReason != agent.StopError {
			t.Errorf("Run = %+v, %v", res, err)
		}
	})
	t.Run("event store failure", func(t *testing.T) {
		sb := newSandbox(t)
		tk := task(sb, nil)
		tk.Emit = trajectory.SinkFunc(func(trajectory.Event) error { return errors.New("disk full") })
		conn := &scripted{replies: []model.Response{answer("done", u100)}}
		if _, err := New(conn, "m", spec.Builtin{}, nil, nil).Run(t.Context(), tk); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("Run error = %v, want the sink's error", err)
		}
	})
}

type connFunc func(context.Context, model.Request) (model.Response, error)

func (f connFunc) Chat(ctx context.Context, r model.Request) (model.Response, error) {
	return f(ctx, r)
}

func TestWallClockAndCancel(t *testing.T) {
	sb := newSandbox(t)
	sleepy := &scripted{replies: []model.Response{toolReply(u100, call("s", "bash", map[string]string{"command": "sleep 30"}))}}

	rec := &recorder{}
	res, err := New(sleepy, "m", spec.Builtin{Budget: &spec.Budget{WallClock: spec.Duration(300 * time.Millisecond)}}, nil, nil).Run(t.Context(), task(sb, rec))
	if err != nil || res.StopReason != agent.StopWallClock {
		t.Errorf("wall clock: Run = %+v, %v; want stop wall_clock and no error", res, err)
	}
	if stops := rec.of(trajectory.KindStop); len(stops) != 1 || stops[0].Stop.Reason != agent.StopWallClock {
		t.Errorf("stop events = %+v", stops)
	}

	ctx, cancel := context.WithCancel(t.Context())
	blocking := connFunc(func(ctx context.Context, _ model.Request) (model.Response, error) {
		cancel()
		<-ctx.Done()
		return model.Response{}, ctx.Err()
	})
	res, err = New(blocking, "m", spec.Builtin{}, nil, nil).Run(ctx, task(sb, &recorder{}))
	if !errors.Is(err, context.Canceled) || res.StopReason != agent.StopCanceled {
		t.Errorf("canceled: Run = %+v, %v", res, err)
	}
}

func TestRecordMessagesAndSystemPrompt(t *testing.T) {
	sb := newSandbox(t)
	conn := &scripted{replies: []model.Response{answer("42", u100)}}
	tk := task(sb, &recorder{})
	tk.Input = []trajectory.Message{
		{Role: trajectory.RoleSystem, Content: "You are terse."},
		{Role: trajectory.RoleUser, Content: "What is 6*7?"},
	}
	res, err := New(conn, "m", spec.Builtin{Instructions: "Answer in digits."}, nil, nil).Run(t.Context(), tk)
	if err != nil || res.Output != "42" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	req := conn.reqs[0]
	if !strings.HasSuffix(req.System, "\n\nYou are terse.\n\nAnswer in digits.") {
		t.Errorf("system prompt does not end with the record's system message then the instructions:\n%s", req.System)
	}
	if len(req.Messages) != 1 || req.Messages[0].Content != "What is 6*7?" {
		t.Errorf("messages = %+v", req.Messages)
	}
}

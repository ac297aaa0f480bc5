package usersim

import (
	"context"
	"strings"
	"sync"
	"testing"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// capture keeps the requests a real connector is sent.
type capture struct {
	model.Connector
	mu   sync.Mutex
	reqs []model.Request
}

func (c *capture) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return c.Connector.Chat(ctx, req)
}

func scripted(t *testing.T, replies ...string) *capture {
	t.Helper()
	s := &spec.Script{}
	for _, r := range replies {
		s.Default = append(s.Default, spec.ScriptReply{Content: r})
	}
	c, err := model.New(spec.ModelRef{Connector: "scripted", Model: "sim", Script: s}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &capture{Connector: c}
}

func msg(role, content string) trajectory.Message {
	return trajectory.Message{Role: role, Content: content}
}

func TestConversationRolesFlippedAndStopSignal(t *testing.T) {
	ctx := context.Background()
	conn := scripted(t, "Make it 3, please.", "Thanks, that is all. [DONE]")
	sim := New(conn, "", spec.UserSimulator{Persona: "A terse accountant.", Goal: "Get the total to 3.", MaxTurns: 5})
	var events []trajectory.Event
	u := sim.ForTask("rec-1", 2, trajectory.SinkFunc(func(e trajectory.Event) error { events = append(events, e); return nil }))

	conv := []trajectory.Message{
		msg(trajectory.RoleUser, "Set the total."),
		{Role: trajectory.RoleAssistant, ToolCalls: []trajectory.ToolCall{{ID: "c1", Name: "bash"}}},
		{Role: trajectory.RoleTool, Content: "ok", ToolCallID: "c1"},
		msg(trajectory.RoleAssistant, "The total is 2."),
	}
	text, done, err := u.Reply(ctx, conv)
	if err != nil || done || text != "Make it 3, please." {
		t.Fatalf("first reply = %q, %v, %v", text, done, err)
	}
	conv = append(conv, msg(trajectory.RoleUser, text), msg(trajectory.RoleAssistant, "The total is 3."))
	text, done, err = u.Reply(ctx, conv)
	if err != nil || !done || text != "Thanks, that is all." {
		t.Fatalf("second reply = %q, %v, %v; want the closing remark and done", text, done, err)
	}

	if len(conn.reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(conn.reqs))
	}
	req := conn.reqs[1]
	want := []trajectory.Message{
		msg(trajectory.RoleUser, "The total is 2."),
		msg(trajectory.RoleAssistant, "Make it 3, please."),
		msg(trajectory.RoleUser, "The total is 3."),
	}
	if len(req.Messages) != len(want) {
		t.Fatalf("flipped conversation = %+v", req.Messages)
	}
	for i := range want {
		if req.Messages[i].Role != want[i].Role || req.Messages[i].Content != want[i].Content || len(req.Messages[i].ToolCalls) > 0 {
			t.Errorf("message %d = %+v, want %+v", i, req.Messages[i], want[i])
		}
	}
	for _, s := range []string{"You are the USER", "A terse accountant.", "Get the total to 3.", "Set the total.", StopSignal} {
		if !strings.Contains(req.System, s) {
			t.Errorf("system prompt lacks %q:\n%s", s, req.System)
		}
	}
	if req.RecordID != "rec-1" || req.Trial != 2 {
		t.Errorf("request for record %q trial %d", req.RecordID, req.Trial)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want a model_call per call", len(events))
	}
	for _, e := range events {
		if e.Kind != trajectory.KindModelCall || e.ModelCall.Role != Role || e.ModelCall.Model != "sim" || e.ModelCall.Usage.Total() == 0 {
			t.Errorf("event %+v %+v", e, e.ModelCall)
		}
	}
}

func TestMaxTurnsEndsWithoutAModelCall(t *testing.T) {
	ctx := context.Background()
	conn := scripted(t, "again", "and again")
	u := New(conn, "", spec.UserSimulator{Goal: "never stop", MaxTurns: 2})
	conv := []trajectory.Message{msg(trajectory.RoleUser, "start"), msg(trajectory.RoleAssistant, "a1")}
	text, done, err := u.Reply(ctx, conv)
	if err != nil || done || text != "again" {
		t.Fatalf("turn 2 = %q, %v, %v", text, done, err)
	}
	conv = append(conv, msg(trajectory.RoleUser, text), msg(trajectory.RoleAssistant, "a2"))
	text, done, err = u.Reply(ctx, conv)
	if err != nil || !done || text != "" {
		t.Fatalf("turn 3 of max_turns 2 = %q, %v, %v; want done", text, done, err)
	}
	if len(conn.reqs) != 1 {
		t.Errorf("%d model calls, want 1: max_turns ends the conversation without asking", len(conn.reqs))
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		text string
		done bool
	}{
		{"[DONE]", "", true},
		{"  [DONE]\n", "", true},
		{"Great, thanks! [DONE]", "Great, thanks!", true},
		{"What does [DONE] mean?", "What does [DONE] mean?", false},
		{"Please go on.", "Please go on.", false},
		{"[done]", "[done]", false},
	} {
		text, done := parse(c.in)
		if text != c.text || done != c.done {
			t.Errorf("parse(%q) = %q, %v; want %q, %v", c.in, text, done, c.text, c.done)
		}
	}
}

func TestEmptyReplyIsAnError(t *testing.T) {
	conn := scripted(t, "   ")
	_, _, err := New(conn, "", spec.UserSimulator{MaxTurns: 3}).Reply(context.Background(),
		[]trajectory.Message{msg(trajectory.RoleUser, "start"), msg(trajectory.RoleAssistant, "a1")})
	if err == nil || !strings.Contains(err.Error(), "empty message") {
		t.Errorf("err = %v", err)
	}
}

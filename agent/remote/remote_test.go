package remote_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/agent/remote"
	"evals.si/agent/remote/remotetest"
	"evals.si/trajectory"
)

// brokenUser is a user simulator that cannot reply.
type brokenUser struct{}

func (brokenUser) Reply(context.Context, []trajectory.Message) (string, bool, error) {
	return "", false, errors.New("judge unreachable")
}

// closingUser gives one reply, then is done with a closing remark.
type closingUser struct{ n int }

func (u *closingUser) Reply(context.Context, []trajectory.Message) (string, bool, error) {
	u.n++
	if u.n == 1 {
		return "and then?", false, nil
	}
	return "Thanks.", true, nil
}

// show is an event as "kind@step text", the parts the tests compare.
func show(e trajectory.Event) string {
	s := fmt.Sprintf("%s@%d", e.Kind, e.Step)
	switch {
	case e.Message != nil:
		s += " " + e.Message.Role + ": " + e.Message.Content
	case e.Stop != nil:
		s += " " + e.Stop.Reason + ": " + e.Stop.Detail
	case e.Error != nil:
		s += " " + e.Error.Kind + ": " + e.Error.Message
	case e.Log != nil:
		s += " " + e.Log.Text
	}
	return s
}

func TestConversation(t *testing.T) {
	hi := []trajectory.Message{{Role: trajectory.RoleUser, Content: "hi"}}
	for _, tc := range []struct {
		name        string
		opening     []trajectory.Message
		stepPerTurn bool
		user        agent.User
		answers     []remote.Answer // one per turn; a turn past them fails
		cancel      bool
		wantEvents  []string
		wantResult  agent.Result
		wantErr     string
	}{
		{
			name:       "one turn without a user",
			opening:    hi,
			answers:    []remote.Answer{{Text: "a1"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: a1", "stop@1 answered: "},
			wantResult: agent.Result{Output: "a1", Steps: 1, StopReason: agent.StopAnswered},
		},
		{
			name: "the record's messages open the conversation at step 0",
			opening: []trajectory.Message{{Role: trajectory.RoleSystem, Content: "be brief"},
				{Role: trajectory.RoleUser, Content: "q"}},
			answers:    []remote.Answer{{Text: "a1"}},
			wantEvents: []string{"message@0 system: be brief", "message@0 user: q", "message@1 assistant: a1", "stop@1 answered: "},
			wantResult: agent.Result{Output: "a1", Steps: 1, StopReason: agent.StopAnswered},
		},
		{
			name:    "replies follow the step they answer, the user's closing remark is recorded",
			opening: hi,
			user:    &closingUser{},
			answers: []remote.Answer{{Text: "a1"}, {Text: "a2"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: a1", "message@1 user: and then?",
				"message@2 assistant: a2", "message@2 user: Thanks.", "stop@2 answered: the user is done after 2 user turns"},
			wantResult: agent.Result{Output: "a2", Steps: 2, StopReason: agent.StopAnswered},
		},
		{
			name:        "a step per turn, opened by the user's message",
			opening:     hi,
			stepPerTurn: true,
			user:        &remotetest.User{Replies: []string{"more"}},
			answers:     []remote.Answer{{Text: "a1"}, {Text: "a2"}},
			wantEvents: []string{"message@1 user: hi", "message@1 assistant: a1", "message@2 user: more",
				"message@2 assistant: a2", "stop@2 answered: the user is done after 2 user turns"},
			wantResult: agent.Result{Output: "a2", Steps: 2, StopReason: agent.StopAnswered},
		},
		{
			name:       "the agent ends the conversation without asking the user",
			opening:    hi,
			user:       brokenUser{},
			answers:    []remote.Answer{{Text: "cannot", End: "task ended failed"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: cannot", "stop@1 answered: task ended failed"},
			wantResult: agent.Result{Output: "cannot", Steps: 1, StopReason: agent.StopAnswered},
		},
		{
			name:       "waiting for input without a user simulator",
			opening:    hi,
			answers:    []remote.Answer{{Text: "which one?", Waiting: "task ended input-required"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: which one?", "stop@1 answered: task ended input-required (no user simulator to answer)"},
			wantResult: agent.Result{Output: "which one?", Steps: 1, StopReason: agent.StopAnswered},
		},
		{
			name:    "waiting for input when the user is done",
			opening: hi,
			user:    &remotetest.User{},
			answers: []remote.Answer{{Text: "which one?", Waiting: "task ended input-required"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: which one?",
				"stop@1 answered: task ended input-required (the user simulator was done); the user is done after 1 user turns"},
			wantResult: agent.Result{Output: "which one?", Steps: 1, StopReason: agent.StopAnswered},
		},
		{
			name:       "a turn's error is an infrastructure error",
			opening:    hi,
			user:       &remotetest.User{Replies: []string{"more"}},
			answers:    []remote.Answer{{Text: "a1"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: a1", "message@1 user: more", "error@2 agent: connection refused", "stop@2 error: connection refused"},
			wantResult: agent.Result{Output: "a1", Steps: 2, StopReason: agent.StopError},
			wantErr:    "connection refused",
		},
		{
			name:       "a canceled run records no error event",
			opening:    hi,
			cancel:     true,
			wantEvents: []string{"message@0 user: hi", "stop@1 canceled: connection refused"},
			wantResult: agent.Result{Steps: 1, StopReason: agent.StopCanceled},
			wantErr:    "connection refused",
		},
		{
			name:       "the user simulator's error",
			opening:    hi,
			user:       brokenUser{},
			answers:    []remote.Answer{{Text: "a1"}},
			wantEvents: []string{"message@0 user: hi", "message@1 assistant: a1", "error@1 agent: test agent: user simulator: judge unreachable", "stop@1 error: test agent: user simulator: judge unreachable"},
			wantResult: agent.Result{Output: "a1", Steps: 1, StopReason: agent.StopError},
			wantErr:    "test agent: user simulator: judge unreachable",
		},
		{
			name:       "no opening",
			wantEvents: []string{`error@0 agent: test agent: record "r1" has no instruction`, `stop@0 error: test agent: record "r1" has no instruction`},
			wantResult: agent.Result{StopReason: agent.StopError},
			wantErr:    `test agent: record "r1" has no instruction`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			evs, sink := remotetest.Collect()
			task := agent.Task{RecordID: "r1", Emit: sink, User: tc.user}
			c, err := remote.Start("test agent", &task)
			if err != nil {
				t.Fatal(err)
			}
			c.StepPerTurn = tc.stepPerTurn
			turns := 0
			res, err := c.Run(ctx, tc.opening, func(ctx context.Context, conv []trajectory.Message) (remote.Answer, error) {
				if conv[len(conv)-1].Role != trajectory.RoleUser {
					t.Errorf("turn %d sends %+v, want a user message last", turns+1, conv[len(conv)-1])
				}
				if !tc.stepPerTurn {
					c.Steps++
				}
				if turns == len(tc.answers) {
					return remote.Answer{}, errors.New("connection refused")
				}
				ans := tc.answers[turns]
				turns++
				return ans, c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps,
					Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: ans.Text}})
			})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if res != tc.wantResult {
				t.Errorf("result = %+v, want %+v", res, tc.wantResult)
			}
			var got []string
			for _, e := range *evs {
				if e.Time.IsZero() {
					t.Errorf("%s has no time", show(e))
				}
				got = append(got, show(e))
			}
			if strings.Join(got, "\n") != strings.Join(tc.wantEvents, "\n") {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.wantEvents, "\n"))
			}
		})
	}
}

func TestStartRefusesATaskWithoutASink(t *testing.T) {
	_, err := remote.Start("test agent", &agent.Task{RecordID: "r1"})
	if err == nil || err.Error() != "test agent: task has no event sink" {
		t.Errorf("err = %v", err)
	}
}

// A sink that fails is an error naming the event being recorded.
func TestEmitWrapsTheSinksError(t *testing.T) {
	task := agent.Task{Emit: trajectory.SinkFunc(func(trajectory.Event) error { return errors.New("disk full") })}
	c, err := remote.Start("test agent", &task)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Log("x"); err == nil || err.Error() != "recording log event: disk full" {
		t.Errorf("err = %v", err)
	}
}

func TestNotesAreNotRepeated(t *testing.T) {
	c, err := remote.Start("test agent", &agent.Task{Emit: trajectory.SinkFunc(func(trajectory.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"tool reported an error", "response r2 incomplete", "tool reported an error"} {
		c.Note(n)
	}
	if got, want := c.Detail(), "tool reported an error; response r2 incomplete"; got != want {
		t.Errorf("detail = %q, want %q", got, want)
	}
}

func TestOpening(t *testing.T) {
	sys := trajectory.Message{Role: trajectory.RoleSystem, Content: "be brief"}
	user := trajectory.Message{Role: trajectory.RoleUser, Content: "q"}
	asst := trajectory.Message{Role: trajectory.RoleAssistant, Content: "a"}
	instr := trajectory.Message{Role: trajectory.RoleUser, Content: "do it"}
	for _, tc := range []struct {
		name string
		task agent.Task
		want []trajectory.Message
	}{
		{"instruction", agent.Task{Instruction: "do it"}, []trajectory.Message{instr}},
		{"messages ending with the user", agent.Task{Instruction: "do it", Input: []trajectory.Message{sys, user}}, []trajectory.Message{sys, user}},
		{"messages ending with the assistant", agent.Task{Instruction: "do it", Input: []trajectory.Message{user, asst}}, []trajectory.Message{instr}},
		{"nothing", agent.Task{Instruction: "  "}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := remote.Opening(tc.task)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Opening = %+v, want %+v", got, tc.want)
			}
		})
	}
}

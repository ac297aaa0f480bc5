package builtin

import (
	"context"
	"fmt"

	"evals.si/agent"
	"evals.si/trajectory"
)

// userTurn continues a multi-turn task (Task.User set) after the agent
// answered without a tool call: it asks the user for the next message and
// records it. It returns nil when the task has no user or the user is done;
// the stop detail then says which.
//
// The user sees the conversation as a chat user would: the opening
// messages, the agent's answers (turns without tool calls) and its own
// messages; tool calls, tool results and the system prompt stay hidden.
func (r *run) userTurn(ctx context.Context, answer trajectory.Message) (*trajectory.Message, string, error) {
	if r.task.User == nil {
		return nil, "", nil
	}
	if r.dialog == nil {
		r.dialog = openingDialog(r.task)
	}
	r.dialog = append(r.dialog, trajectory.Message{Role: trajectory.RoleAssistant, Content: answer.Content})
	text, done, err := r.task.User.Reply(ctx, r.dialog)
	if err != nil {
		return nil, "", err
	}
	turns := 0
	for _, m := range r.dialog {
		if m.Role == trajectory.RoleUser {
			turns++
		}
	}
	if done {
		if text != "" {
			// A closing remark: recorded, not answered.
			if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps,
				Message: &trajectory.Message{Role: trajectory.RoleUser, Content: text}}); err != nil {
				return nil, "", err
			}
		}
		return nil, fmt.Sprintf("the user is done after %d user turns", turns), nil
	}
	m := trajectory.Message{Role: trajectory.RoleUser, Content: text}
	r.dialog = append(r.dialog, m)
	if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &m}); err != nil {
		return nil, "", err
	}
	return &m, "", nil
}

// openingDialog is the conversation's start as the user sees it: the
// record's non-system messages, else its instruction.
func openingDialog(t *agent.Task) []trajectory.Message {
	var out []trajectory.Message
	for _, m := range t.Input {
		if m.Role == trajectory.RoleUser || m.Role == trajectory.RoleAssistant {
			out = append(out, trajectory.Message{Role: m.Role, Content: m.Content})
		}
	}
	if len(out) == 0 {
		out = []trajectory.Message{{Role: trajectory.RoleUser, Content: t.Instruction}}
	}
	return out
}

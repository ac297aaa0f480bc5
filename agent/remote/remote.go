// Package remote holds what the agent kinds that work outside the sandbox,
// behind a network protocol (a2a, mcp, responses, http), share: the
// conversation with the record's opening messages and the user simulator
// (agent.Task.User), the events that record it, and how a run stops. Each
// kind brings only its wire protocol, as a Turn.
//
// A conversation runs turns until the agent ends it, there is no user
// simulator, or the simulator is done: after each answer the simulator
// reads the conversation and gives the next user message, which is recorded
// and sent in the next turn. A closing remark (text the simulator gives with
// done) is recorded, not answered. The stop event says why the conversation
// ended in its detail ("the user is done after 2 user turns", notes the
// kind made); an infrastructure error ends it with an error event and stop
// reason error, or canceled when the run's context is done.
package remote

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/trajectory"
)

// Turn sends the conversation's newest user message(s) to the agent,
// records what the agent did (through the Conversation's Emit) and returns
// its answer. conv is the conversation so far, ending with what to send: on
// the first turn the opening messages, later one user message. A returned
// error is an infrastructure error and ends the run.
type Turn func(ctx context.Context, conv []trajectory.Message) (Answer, error)

// Answer is how a turn ended.
type Answer struct {
	// Text is the agent's answer: the run's output when it is the last.
	Text string
	// End, when set, ends the conversation after this answer without asking
	// the user (an A2A task that failed); it is noted in the stop detail.
	End string
	// Waiting, when set, says the agent waits for the user's input (an A2A
	// task in input-required). When the conversation ends here it is noted
	// with why nobody answered.
	Waiting string
}

// Conversation is one run of a remote agent: its task, steps, usage and
// answer.
type Conversation struct {
	name string
	task *agent.Task
	// StepPerTurn makes each turn one step, opened by its user message (the
	// Conversation counts steps). Otherwise turns count their own steps (a
	// model call, a reported message) and a user message is recorded at the
	// step it follows.
	StepPerTurn bool
	// Steps, Usage and CostUSD go into the Result; turns add to them.
	Steps   int
	Usage   trajectory.Usage
	CostUSD float64
	out     string
	notes   []string
}

// Start begins a run of the agent kind name (e.g. "http agent", the prefix
// of its errors). A task without an event sink is refused.
func Start(name string, t *agent.Task) (*Conversation, error) {
	if t.Emit == nil {
		return nil, fmt.Errorf("%s: task has no event sink", name)
	}
	return &Conversation{name: name, task: t}, nil
}

// Opening is the record's conversation when it has one ending in a user
// message (system messages included: the agent decides what to do with
// them), else the instruction as one user message; nil when there is
// neither.
func Opening(t agent.Task) []trajectory.Message {
	var out []trajectory.Message
	for _, m := range t.Input {
		out = append(out, trajectory.Message{Role: m.Role, Content: m.Content})
	}
	if len(out) > 0 && out[len(out)-1].Role == trajectory.RoleUser {
		return out
	}
	return Instruction(t)
}

// Instruction is the instruction as one user message, for kinds that send
// one message a turn; nil when it is blank.
func Instruction(t agent.Task) []trajectory.Message {
	if strings.TrimSpace(t.Instruction) == "" {
		return nil
	}
	return []trajectory.Message{{Role: trajectory.RoleUser, Content: t.Instruction}}
}

// CheckOpening refuses an empty opening, for a kind that checks before it
// connects.
func (c *Conversation) CheckOpening(opening []trajectory.Message) error {
	if len(opening) == 0 {
		return fmt.Errorf("%s: record %q has no instruction", c.name, c.task.RecordID)
	}
	return nil
}

// Run converses and stops: Converse, then Stop, or Fail on an error.
func (c *Conversation) Run(ctx context.Context, opening []trajectory.Message, turn Turn) (agent.Result, error) {
	if err := c.Converse(ctx, opening, turn); err != nil {
		return c.Fail(ctx, err)
	}
	return c.Stop()
}

// Converse records the opening messages and runs turns until the
// conversation ends (see the package comment). It emits no stop event: the
// caller ends the run with Stop or Fail.
func (c *Conversation) Converse(ctx context.Context, opening []trajectory.Message, turn Turn) error {
	if err := c.CheckOpening(opening); err != nil {
		return err
	}
	conv := slices.Clone(opening)
	if err := c.userMessages(conv); err != nil {
		return err
	}
	for {
		start := time.Now()
		ans, err := turn(ctx, conv)
		observe(ctx, Call{Kind: c.name, Start: start, End: time.Now(), Err: err})
		if err != nil {
			return err
		}
		c.out = ans.Text
		conv = append(conv, trajectory.Message{Role: trajectory.RoleAssistant, Content: ans.Text})
		if ans.End != "" {
			c.Note(ans.End)
			return nil
		}
		if c.task.User == nil {
			if ans.Waiting != "" {
				c.Note(ans.Waiting + " (no user simulator to answer)")
			}
			return nil
		}
		next, done, err := c.task.User.Reply(ctx, conv)
		if err != nil {
			return fmt.Errorf("%s: user simulator: %w", c.name, err)
		}
		if done {
			if ans.Waiting != "" {
				c.Note(ans.Waiting + " (the user simulator was done)")
			}
			return c.userDone(next, conv)
		}
		msg := trajectory.Message{Role: trajectory.RoleUser, Content: next}
		conv = append(conv, msg)
		if err := c.userMessages(conv[len(conv)-1:]); err != nil {
			return err
		}
	}
}

// userMessages records the user messages that open a turn.
func (c *Conversation) userMessages(msgs []trajectory.Message) error {
	if c.StepPerTurn {
		c.Steps++
	}
	for i := range msgs {
		if err := c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, Message: &msgs[i]}); err != nil {
			return err
		}
	}
	return nil
}

// userDone records the end of a conversation the user ended: a closing
// remark is recorded, not answered.
func (c *Conversation) userDone(text string, conv []trajectory.Message) error {
	turns := 0
	for _, m := range conv {
		if m.Role == trajectory.RoleUser {
			turns++
		}
	}
	c.Note(fmt.Sprintf("the user is done after %d user turns", turns))
	if text == "" {
		return nil
	}
	return c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: text}})
}

// Note adds s to the stop event's detail; a note already made is not
// repeated.
func (c *Conversation) Note(s string) {
	if !slices.Contains(c.notes, s) {
		c.notes = append(c.notes, s)
	}
}

// Detail is the stop event's detail: the notes so far.
func (c *Conversation) Detail() string { return strings.Join(c.notes, "; ") }

// Emit records e, stamped with the time now.
func (c *Conversation) Emit(e trajectory.Event) error {
	e.Time = time.Now()
	if err := c.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

// Log records a log event at the current step.
func (c *Conversation) Log(text string) error {
	return c.Emit(trajectory.Event{Kind: trajectory.KindLog, Step: c.Steps, Log: &trajectory.Log{Text: text}})
}

func (c *Conversation) result(reason string) agent.Result {
	return agent.Result{Output: c.out, Usage: c.Usage, CostUSD: c.CostUSD, Steps: c.Steps, StopReason: reason}
}

// Stop ends a run that answered.
func (c *Conversation) Stop() (agent.Result, error) {
	return c.result(agent.StopAnswered), c.Emit(trajectory.Event{Kind: trajectory.KindStop, Step: c.Steps,
		Stop: &trajectory.Stop{Reason: agent.StopAnswered, Detail: c.Detail()}})
}

// Fail ends a run with an infrastructure error: an error event and a stop
// event (best effort: the sink may be what failed), and err returned. When
// ctx is done the run was canceled, which is no error of the agent: only
// the stop event is recorded.
func (c *Conversation) Fail(ctx context.Context, err error) (agent.Result, error) {
	reason := agent.StopError
	if ctx.Err() != nil {
		reason = agent.StopCanceled
	}
	if reason == agent.StopError {
		_ = c.Emit(trajectory.Event{Kind: trajectory.KindError, Step: c.Steps, Error: &trajectory.Error{Kind: "agent", Message: err.Error()}})
	}
	_ = c.Emit(trajectory.Event{Kind: trajectory.KindStop, Step: c.Steps, Stop: &trajectory.Stop{Reason: reason, Detail: err.Error()}})
	return c.result(reason), err
}

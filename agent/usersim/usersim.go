// Package usersim is the user simulator (harness.builtin.user_simulator):
// an LLM that plays the user of a multi-turn task, speaking through the
// judge's connector.
//
// The simulator sees the conversation from the user's side, with the roles
// flipped: the agent's answers are user turns, the simulated user's own
// earlier messages are assistant turns. The record's opening message, which
// the simulator did not write, goes in its system prompt, so the flipped
// conversation starts with the agent's first answer (every provider accepts
// a conversation that starts with a user turn, and a scripted judge's reply
// i answers the agent's (i+1)-th answer).
//
// The simulator ends the conversation with the stop signal: a reply whose
// trimmed text is StopSignal or ends with it. Text before the signal is a
// closing remark. max_turns counts user turns, the opening message
// included; when the next message would exceed it, the simulator is done
// without a model call.
package usersim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// StopSignal ends the conversation when a reply is or ends with it.
const StopSignal = "[DONE]"

// DefaultMaxTurns bounds user turns when max_turns is 0.
const DefaultMaxTurns = 10

// Role marks the simulator's model calls in the trajectory.
const Role = "user_simulator"

// Simulator is the configured user simulator. Bind it to a trial with
// ForTask; its Reply on its own works but records nothing.
type Simulator struct {
	conn  model.Connector
	model string
	cfg   spec.UserSimulator
}

var _ agent.User = (*Simulator)(nil)

// New returns a simulator that asks conn (the judge) for the user's
// messages. modelName is sent with every call (empty: the connector's).
func New(conn model.Connector, modelName string, cfg spec.UserSimulator) *Simulator {
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	return &Simulator{conn: conn, model: modelName, cfg: cfg}
}

// ForTask returns the simulator bound to one trial: its requests carry the
// record and trial (a scripted judge picks the record's script by them),
// and each of its model calls is emitted as a model_call event with role
// user_simulator. The engine binds the simulator before every trial.
func (s *Simulator) ForTask(recordID string, trial int, emit trajectory.Sink) agent.User {
	return &bound{s: s, recordID: recordID, trial: trial, emit: emit}
}

// Reply implements agent.User without recording the model calls.
func (s *Simulator) Reply(ctx context.Context, conversation []trajectory.Message) (string, bool, error) {
	return (&bound{s: s}).Reply(ctx, conversation)
}

type bound struct {
	s        *Simulator
	recordID string
	trial    int
	emit     trajectory.Sink
}

// Reply returns the user's next message, or done.
func (b *bound) Reply(ctx context.Context, conversation []trajectory.Message) (string, bool, error) {
	opening, flipped := Flip(conversation)
	// User turns so far: the opening message plus the simulator's replies.
	turns := 1 + model.AssistantTurns(flipped)
	if turns >= b.s.cfg.MaxTurns {
		return "", true, nil
	}
	if len(flipped) == 0 || flipped[len(flipped)-1].Role != trajectory.RoleUser {
		return "", false, errors.New("user simulator: the conversation does not end with an answer of the agent")
	}
	start := time.Now()
	resp, err := b.s.conn.Chat(ctx, model.Request{
		Model:    b.s.model,
		System:   SystemPrompt(b.s.cfg, opening),
		Messages: flipped,
		RecordID: b.recordID,
		Trial:    b.trial,
	})
	if err != nil {
		return "", false, fmt.Errorf("user simulator: model call: %w", err)
	}
	if b.emit != nil {
		if err := b.emit.Emit(trajectory.Event{Kind: trajectory.KindModelCall, Time: time.Now(), DurationMS: time.Since(start).Milliseconds(),
			ModelCall: &trajectory.ModelCall{Model: firstNonEmpty(resp.Model, b.s.model), Usage: resp.Usage, StopReason: resp.StopReason, Role: Role,
				Provider: resp.Provider, RequestModel: b.s.model, ResponseModel: resp.Model, ResponseID: resp.ID}}); err != nil {
			return "", false, fmt.Errorf("user simulator: recording its model call: %w", err)
		}
	}
	text, done := parse(resp.Message.Content)
	if !done && text == "" {
		// An empty message would leave the agent nothing to answer.
		return "", false, errors.New("user simulator: the judge replied with an empty message (it must write the user's next message or " + StopSignal + ")")
	}
	return text, done, nil
}

// parse splits a reply into its text and whether it carries the stop
// signal; the text before the signal is a closing remark.
func parse(reply string) (string, bool) {
	t := strings.TrimSpace(reply)
	if rest, ok := strings.CutSuffix(t, StopSignal); ok {
		return strings.TrimSpace(rest), true
	}
	return t, false
}

// Flip returns the conversation as the simulator sees it: the opening user
// messages (before the agent's first answer) joined as one text, and the
// rest with roles flipped. Only text turns count: system and tool messages
// and empty assistant messages (tool-call-only turns) are dropped, and
// consecutive turns of one side are merged.
func Flip(conversation []trajectory.Message) (opening string, flipped []trajectory.Message) {
	var open []string
	answered := false
	for _, m := range conversation {
		var role string
		switch m.Role {
		case trajectory.RoleUser:
			if !answered {
				open = append(open, m.Content)
				continue
			}
			role = trajectory.RoleAssistant
		case trajectory.RoleAssistant:
			if strings.TrimSpace(m.Content) == "" {
				continue
			}
			answered = true
			role = trajectory.RoleUser
		default:
			continue
		}
		if n := len(flipped); n > 0 && flipped[n-1].Role == role {
			flipped[n-1].Content += "\n\n" + m.Content
			continue
		}
		flipped = append(flipped, trajectory.Message{Role: role, Content: m.Content})
	}
	return strings.Join(open, "\n\n"), flipped
}

// SystemPrompt is the simulator's system prompt.
func SystemPrompt(cfg spec.UserSimulator, opening string) string {
	var b strings.Builder
	b.WriteString("You are the USER in a conversation with an AI assistant. You are not the assistant: do not help, solve or explain; speak only as the user would.\n")
	if cfg.Persona != "" {
		fmt.Fprintf(&b, "\nYour persona:\n%s\n", strings.TrimSpace(cfg.Persona))
	}
	if cfg.Goal != "" {
		fmt.Fprintf(&b, "\nYour goal in this conversation:\n%s\n", strings.TrimSpace(cfg.Goal))
	}
	if opening != "" {
		fmt.Fprintf(&b, "\nYou opened the conversation with this message:\n%s\n", strings.TrimSpace(opening))
	}
	fmt.Fprintf(&b, "\nThe assistant's messages come to you as user turns; your own earlier messages are the assistant turns. "+
		"Write only your next message to the assistant, in the first person, with no commentary, labels or quotes. "+
		"When your goal is met, or you want to stop, reply with exactly %s (you may put a short closing remark before it).", StopSignal)
	return b.String()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

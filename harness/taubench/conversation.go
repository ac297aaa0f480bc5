package taubench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/agent/usersim"
	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/tau2"
	"evals.si/model"
	"evals.si/trajectory"
)

// conversation is one simulation: tau2's half-duplex orchestrator. The
// agent opens with the greeting; then each step passes one message: the
// user's (text to the agent, or tool calls on their phone), the agent's
// (text to the user, or tool calls), or the environment's tool results
// back to whoever called. It ends when the agent says ###STOP###, the user
// says ###STOP###, ###TRANSFER### or ###OUT-OF-SCOPE###, or at max_steps or
// max_errors.
type conversation struct {
	h    *Harness
	t    agent.Task
	md   *Metadata
	data domain.Data

	world       *tau2.World
	messages    []tau2.Message // what tau2 grades
	termination string

	steps, errors int
	agentCalls    int
	usage         trajectory.Usage
	cost          float64
	output        string
	seq           int
}

func (c *conversation) emit(e trajectory.Event) error {
	if c.t.Emit == nil {
		return nil
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if err := c.t.Emit.Emit(e); err != nil {
		return fmt.Errorf("taubench: recording the trajectory: %w", err)
	}
	return nil
}

func (c *conversation) result() agent.Result {
	stop := agent.StopAnswered
	switch c.termination {
	case tau2.AgentStop, tau2.UserStop:
	case "":
		stop = agent.StopError
	default:
		stop = agent.StopMaxSteps
	}
	return agent.Result{Output: c.output, Usage: c.usage, CostUSD: c.cost, Steps: c.agentCalls, StopReason: stop}
}

func (c *conversation) run(ctx context.Context) error {
	w, err := newWorld(c.data, &c.md.Task)
	if err != nil {
		return err
	}
	c.world = w
	agentTools := schemas(w.Env().Agent().Tools(), nil)
	var userTools []model.Tool
	if u := w.Env().User(); u != nil {
		userTools = schemas(u.Tools(), c.md.Task.UserTools)
	}
	agentSystem := agentSystemPrompt(c.data.Policy())
	userSystem := userSystemPrompt(userGuidelines(DataRoot(c.md.Dir), len(userTools) > 0), c.md.Task.UserScenario)
	if err := c.emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleSystem, Content: agentSystem}}); err != nil {
		return err
	}
	if err := c.add(tau2.Message{Role: "assistant", Content: greeting}); err != nil {
		return err
	}
	// Who the last message is for.
	to := tau2.User
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch to {
		case tau2.User:
			msg, err := c.userTurn(ctx, userSystem, userTools)
			if err != nil {
				return err
			}
			if err := c.add(msg); err != nil {
				return err
			}
			if len(msg.ToolCalls) == 0 && userStops(msg.Content) {
				c.termination = tau2.UserStop
				return nil
			}
			to = tau2.Assistant
			if len(msg.ToolCalls) > 0 {
				if err := c.runTools(msg.ToolCalls); err != nil {
					return err
				}
				to = tau2.User
			}
		case tau2.Assistant:
			msg, err := c.agentTurn(ctx, agentSystem, agentTools)
			if err != nil {
				return err
			}
			if err := c.add(msg); err != nil {
				return err
			}
			if strings.Contains(msg.Content, agentStop) {
				c.termination = tau2.AgentStop
				if len(msg.ToolCalls) > 0 {
					// tau2 raises here (its environment would get the last
					// message): no reward. The model's doing, so a score.
					c.termination = tau2.AgentError
				}
				return nil
			}
			to = tau2.User
			if len(msg.ToolCalls) > 0 {
				if err := c.runTools(msg.ToolCalls); err != nil {
					return err
				}
				to = tau2.Assistant
			}
		}
		// tau2 checks the limits when no tool results are pending.
		if c.steps >= c.h.o.MaxSteps {
			c.termination = tau2.MaxSteps
			return nil
		}
		if c.errors >= c.h.o.MaxErrors {
			c.termination = tau2.TooManyErrors
			return nil
		}
	}
}

// userStops is UserSimulator.is_stop.
func userStops(content string) bool {
	return strings.Contains(content, userStop) || strings.Contains(content, userTransfer) || strings.Contains(content, userOutOfScope)
}

// add appends a message to the conversation and the trajectory: one
// orchestrator step.
func (c *conversation) add(m tau2.Message) error {
	c.messages = append(c.messages, m)
	c.steps++
	if m.Role == "assistant" && m.Content != "" {
		c.output = m.Content
	}
	role := trajectory.RoleAssistant
	if m.Role == "user" {
		role = trajectory.RoleUser
	}
	tm := trajectory.Message{Role: role, Content: m.Content}
	for _, tc := range m.ToolCalls {
		tm.ToolCalls = append(tm.ToolCalls, trajectory.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	step := c.agentCalls
	if err := c.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: step, Message: &tm}); err != nil {
		return err
	}
	if m.Role == "assistant" {
		for i := range tm.ToolCalls {
			if err := c.emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: step, ToolCall: &tm.ToolCalls[i]}); err != nil {
				return err
			}
		}
	}
	return nil
}

// runTools answers each call from the environment (one step for all of
// them, as tau2 counts it); failed calls count towards max_errors.
func (c *conversation) runTools(calls []tau2.ToolCall) error {
	for _, tc := range calls {
		start := time.Now()
		res := c.world.Respond(tc)
		if res.Error {
			c.errors++
		}
		c.messages = append(c.messages, res)
		step := c.agentCalls
		if tc.Requestor == tau2.User {
			// The user's own phone: part of the conversation tau2 grades,
			// recorded as the user's tool message.
			err := c.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: step, Message: &trajectory.Message{
				Role: trajectory.RoleTool, Content: res.Content, ToolCallID: tc.ID, Name: "user:" + tc.Name}})
			if err != nil {
				return err
			}
			continue
		}
		err := c.emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: step, DurationMS: time.Since(start).Milliseconds(),
			ToolResult: &trajectory.ToolResult{CallID: tc.ID, Name: tc.Name, Output: res.Content, IsError: res.Error}})
		if err != nil {
			return err
		}
	}
	c.steps++
	return nil
}

// agentTurn asks the target model for the agent's next message, showing
// it what tau2's agent sees: its own messages and tool results, and the
// user's text messages.
func (c *conversation) agentTurn(ctx context.Context, system string, tools []model.Tool) (tau2.Message, error) {
	var msgs []trajectory.Message
	for _, m := range c.messages {
		switch {
		case m.Role == "assistant":
			msgs = append(msgs, wireMessage(trajectory.RoleAssistant, m))
		case m.Role == "user" && len(m.ToolCalls) == 0:
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleUser, Content: m.Content})
		case m.Role == "tool" && m.Requestor != tau2.User:
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleTool, Content: m.Content, ToolCallID: m.ID})
		}
	}
	c.agentCalls++
	resp, err := c.chat(ctx, c.h.o.Agent, c.h.o.AgentModel, "", system, msgs, tools)
	if err != nil {
		return tau2.Message{}, fmt.Errorf("taubench: the agent's model call: %w", err)
	}
	return c.fromWire("assistant", tau2.Assistant, resp.Message), nil
}

// userTurn asks the judge for the user's next message, with the roles
// flipped as tau2's UserState.flip_roles does: the agent's text messages
// are user turns, the user's own messages (and tool calls) assistant
// turns, the user's tool results tool messages.
func (c *conversation) userTurn(ctx context.Context, system string, tools []model.Tool) (tau2.Message, error) {
	var msgs []trajectory.Message
	for _, m := range c.messages {
		switch {
		case m.Role == "user":
			msgs = append(msgs, wireMessage(trajectory.RoleAssistant, m))
		case m.Role == "assistant" && len(m.ToolCalls) == 0:
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleUser, Content: m.Content})
		case m.Role == "tool" && m.Requestor == tau2.User:
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleTool, Content: m.Content, ToolCallID: m.ID})
		}
	}
	resp, err := c.chat(ctx, c.h.o.User, c.h.o.UserModel, usersim.Role, system, msgs, tools)
	if err != nil {
		return tau2.Message{}, fmt.Errorf("taubench: the user simulator's model call: %w", err)
	}
	return c.fromWire("user", tau2.User, resp.Message), nil
}

func (c *conversation) chat(ctx context.Context, conn model.Connector, modelName, role, system string, msgs []trajectory.Message, tools []model.Tool) (model.Response, error) {
	start := time.Now()
	resp, err := conn.Chat(ctx, model.Request{Model: modelName, System: system, Messages: msgs, Tools: tools,
		RecordID: c.t.RecordID, Trial: c.t.Trial})
	if err != nil {
		return resp, err
	}
	name := resp.Model
	if name == "" {
		name = modelName
	}
	var usd float64
	if c.h.o.Pricing != nil {
		usd, _ = c.h.o.Pricing.Cost(name, resp.Usage)
	}
	if role == "" {
		c.usage = c.usage.Add(resp.Usage)
		c.cost += usd
	}
	err = c.emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: c.agentCalls, DurationMS: time.Since(start).Milliseconds(),
		ModelCall: &trajectory.ModelCall{Model: name, Usage: resp.Usage, CostUSD: usd, StopReason: resp.StopReason, Role: role,
			Provider: resp.Provider, RequestModel: modelName, ResponseModel: resp.Model, ResponseID: resp.ID}})
	return resp, err
}

// wireMessage is a conversation message as a model is sent it, in role.
func wireMessage(role string, m tau2.Message) trajectory.Message {
	out := trajectory.Message{Role: role, Content: m.Content}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, trajectory.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	return out
}

// fromWire is a model's reply as a conversation message of role, its tool
// calls made by requestor (ids filled in where the model gave none).
func (c *conversation) fromWire(role, requestor string, m trajectory.Message) tau2.Message {
	out := tau2.Message{Role: role, Content: m.Content}
	for _, tc := range m.ToolCalls {
		c.seq++
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", c.seq)
		}
		args := tc.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		out.ToolCalls = append(out.ToolCalls, tau2.ToolCall{ID: id, Name: tc.Name, Arguments: args, Requestor: requestor})
	}
	return out
}

// schemas are a toolkit's tools as a model is offered them; only lists
// the user tools a task names when it names some.
func schemas(list []domain.Schema, only *[]string) []model.Tool {
	keep := map[string]bool{}
	if only != nil {
		for _, n := range *only {
			keep[n] = true
		}
	}
	out := make([]model.Tool, 0, len(list))
	for _, s := range list {
		if only != nil && !keep[s.Name] {
			continue
		}
		out = append(out, model.Tool{Name: s.Name, Description: s.Description, Parameters: s.Parameters})
	}
	return out
}

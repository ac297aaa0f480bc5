package taubench

import (
	"context"
	"fmt"
	"strings"

	"evals.si/harness/taubench/tau2"
)

// oracle plays the task's gold actions as the conversation: each action
// is a tool call by its requestor (the agent's, or for dual control the
// user's on their phone), answered by the live environment; then the agent
// says every piece of information the task requires communicated, and
// ends the conversation. No model is called. It validates the domain, the
// data and the grading: the oracle must score 1.
func (c *conversation) oracle(ctx context.Context) error {
	w, err := newWorld(c.data, &c.md.Task)
	if err != nil {
		return err
	}
	c.world = w
	if err := c.add(tau2.Message{Role: "assistant", Content: greeting}); err != nil {
		return err
	}
	crit := c.md.Task.EvaluationCriteria
	if crit != nil && crit.Actions != nil {
		for i, a := range *crit.Actions {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			role := "assistant"
			if a.By() == tau2.User {
				role = "user"
			}
			id := a.ActionID
			if id == "" {
				id = fmt.Sprintf("gold_%d", i)
			}
			tc := tau2.ToolCall{ID: id, Name: a.Name, Arguments: a.Arguments, Requestor: a.By()}
			if err := c.add(tau2.Message{Role: role, ToolCalls: []tau2.ToolCall{tc}}); err != nil {
				return err
			}
			if err := c.runTools([]tau2.ToolCall{tc}); err != nil {
				return err
			}
		}
	}
	var say []string
	if crit != nil {
		say = append(say, crit.CommunicateInfo...)
	}
	final := strings.Join(append(say, agentStop), "\n")
	if err := c.add(tau2.Message{Role: "assistant", Content: final}); err != nil {
		return err
	}
	c.termination = tau2.AgentStop
	return nil
}

// Package mcpagent drives an agent that is a tool on an MCP server
// (target.agent.mcp): each user message is one tools/call of the named tool
// over streamable HTTP, with the message as the tool's argument, and the
// tool's text result is the agent's answer.
//
// The agent works outside the task's sandbox (it ignores Task.Sandbox); the
// engine still creates the task's environment and runs its checker, so an
// agent that works through, say, its own MCP tools on the same task gets the
// same grading.
//
// A protocol failure (connection refused, an HTTP error, a JSON-RPC error, an
// unknown tool) is an infrastructure error. A tool result with isError set
// is the agent's answer, recorded as such: reporting failure is something
// an agent may do.
package mcpagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"evals.si/agent"
	"evals.si/agent/remote"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// DefaultArgument is the tool argument that carries the user message when
// target.agent.mcp.argument is not set.
const DefaultArgument = "input"

// Agent calls one MCP tool per user message.
type Agent struct {
	url, tool, arg string
	hc             *http.Client
}

// New checks cfg and returns the agent. Only HTTPClient of opts is used.
func New(cfg spec.MCPAgent, opts model.Options) (*Agent, error) {
	if err := remote.CheckURL("target.agent.mcp.url", cfg.URL, "give the MCP server's streamable HTTP endpoint, e.g. http://127.0.0.1:8931/mcp"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Tool) == "" {
		return nil, errors.New("target.agent.mcp.tool is empty: name the tool that runs the agent")
	}
	a := &Agent{url: cfg.URL, tool: cfg.Tool, arg: cfg.Argument, hc: remote.HTTPClient(opts)}
	if a.arg == "" {
		a.arg = DefaultArgument
	}
	return a, nil
}

// Run opens one MCP session for the task and calls the tool once per user
// message: the instruction, then each reply of Task.User until it is done.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	c, err := remote.Start("mcp agent", &t)
	if err != nil {
		return agent.Result{}, err
	}
	c.StepPerTurn = true
	client := mcp.NewClient(&mcp.Implementation{Name: "evalsi", Version: "v1"}, nil)
	// No standalone SSE stream: the agent only needs replies to its calls,
	// and a server that does not offer one would otherwise be retried.
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: a.hc, DisableStandaloneSSE: true, MaxRetries: 2}, nil)
	if err != nil {
		return c.Fail(ctx, fmt.Errorf("mcp agent: connecting to %s: %w", a.url, err))
	}
	defer sess.Close()
	return c.Run(ctx, remote.Instruction(t), func(ctx context.Context, conv []trajectory.Message) (remote.Answer, error) {
		return a.call(ctx, c, sess, conv[len(conv)-1].Content)
	})
}

// call calls the tool with one user message and records its answer.
func (a *Agent) call(ctx context.Context, c *remote.Conversation, sess *mcp.ClientSession, text string) (remote.Answer, error) {
	start := time.Now()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: a.tool, Arguments: map[string]any{a.arg: text}})
	if err != nil {
		return remote.Answer{}, fmt.Errorf("mcp agent: calling tool %q at %s: %w", a.tool, a.url, err)
	}
	answer, err := resultText(res)
	if err != nil {
		return remote.Answer{}, fmt.Errorf("mcp agent: tool %q at %s: %w", a.tool, a.url, err)
	}
	reply := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer}
	if err := c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, DurationMS: time.Since(start).Milliseconds(), Message: &reply}); err != nil {
		return remote.Answer{}, err
	}
	if res.IsError {
		note := fmt.Sprintf("tool %q reported an error (isError)", a.tool)
		c.Note(note)
		if err := c.Log("mcp agent: " + note); err != nil {
			return remote.Answer{}, err
		}
	}
	return remote.Answer{Text: answer}, nil
}

// resultText is a tool result as the agent's answer: its text contents
// joined by newlines, else its structured content as JSON.
func resultText(res *mcp.CallToolResult) (string, error) {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n"), nil
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return "", fmt.Errorf("encoding structured content: %w", err)
		}
		return string(b), nil
	}
	if len(res.Content) > 0 {
		return "", fmt.Errorf("the result has %d content item(s) and none is text", len(res.Content))
	}
	return "", nil
}

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
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"evals.si/agent"
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
	log            *slog.Logger
}

// New checks cfg and returns the agent. Only HTTPClient and Logger of opts
// are used.
func New(cfg spec.MCPAgent, opts model.Options) (*Agent, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target.agent.mcp.url %q is not an http(s) URL: give the MCP server's streamable HTTP endpoint, e.g. http://127.0.0.1:8931/mcp", cfg.URL)
	}
	if strings.TrimSpace(cfg.Tool) == "" {
		return nil, errors.New("target.agent.mcp.tool is empty: name the tool that runs the agent")
	}
	a := &Agent{url: cfg.URL, tool: cfg.Tool, arg: cfg.Argument, hc: opts.HTTPClient, log: opts.Logger}
	if a.arg == "" {
		a.arg = DefaultArgument
	}
	if a.hc == nil {
		a.hc = &http.Client{}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a, nil
}

// Run opens one MCP session for the task and calls the tool once per user
// message: the instruction, then each reply of Task.User until it is done.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	if t.Emit == nil {
		return agent.Result{}, errors.New("mcp agent: task has no event sink")
	}
	r := &run{task: &t}
	client := mcp.NewClient(&mcp.Implementation{Name: "evalsi", Version: "v1"}, nil)
	// No standalone SSE stream: the agent only needs replies to its calls,
	// and a server that does not offer one would otherwise be retried.
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: a.hc, DisableStandaloneSSE: true, MaxRetries: 2}, nil)
	if err != nil {
		return r.fail(ctx, fmt.Errorf("mcp agent: connecting to %s: %w", a.url, err))
	}
	defer sess.Close()

	text := t.Instruction
	if strings.TrimSpace(text) == "" {
		return r.fail(ctx, fmt.Errorf("mcp agent: record %q has no instruction", t.RecordID))
	}
	var conv []trajectory.Message
	for {
		msg := trajectory.Message{Role: trajectory.RoleUser, Content: text}
		conv = append(conv, msg)
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps + 1, Message: &msg}); err != nil {
			return r.fail(ctx, err)
		}
		r.steps++
		start := time.Now()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: a.tool, Arguments: map[string]any{a.arg: text}})
		if err != nil {
			return r.fail(ctx, fmt.Errorf("mcp agent: calling tool %q at %s: %w", a.tool, a.url, err))
		}
		answer, err := resultText(res)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("mcp agent: tool %q at %s: %w", a.tool, a.url, err))
		}
		r.out = answer
		reply := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer}
		conv = append(conv, reply)
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, DurationMS: time.Since(start).Milliseconds(), Message: &reply}); err != nil {
			return r.fail(ctx, err)
		}
		if res.IsError {
			r.detail = fmt.Sprintf("tool %q reported an error (isError)", a.tool)
			if err := r.emit(trajectory.Event{Kind: trajectory.KindLog, Step: r.steps, Log: &trajectory.Log{Text: "mcp agent: " + r.detail}}); err != nil {
				return r.fail(ctx, err)
			}
		}
		if t.User == nil {
			break
		}
		next, done, err := t.User.Reply(ctx, conv)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("mcp agent: user simulator: %w", err))
		}
		if done {
			if err := r.userDone(next, conv); err != nil {
				return r.fail(ctx, err)
			}
			break
		}
		text = next
	}
	return r.stop()
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

// run is the state of one Run.
type run struct {
	task   *agent.Task
	steps  int
	out    string
	detail string
}

func (r *run) emit(e trajectory.Event) error {
	e.Time = time.Now()
	if err := r.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

// userDone records the end of a conversation the user ended: a closing
// remark (text before the simulator's stop signal) is recorded, not
// answered.
func (r *run) userDone(text string, conv []trajectory.Message) error {
	turns := 0
	for _, m := range conv {
		if m.Role == trajectory.RoleUser {
			turns++
		}
	}
	r.detail = strings.TrimPrefix(r.detail+"; ", "; ") + fmt.Sprintf("the user is done after %d user turns", turns)
	if text == "" {
		return nil
	}
	return r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: text}})
}

func (r *run) stop() (agent.Result, error) {
	res := agent.Result{Output: r.out, Steps: r.steps, StopReason: agent.StopAnswered}
	if err := r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: agent.StopAnswered, Detail: r.detail}}); err != nil {
		return res, err
	}
	return res, nil
}

// fail records an infrastructure error (best effort) and returns it; a
// done context is a cancellation, not an error of the agent.
func (r *run) fail(ctx context.Context, err error) (agent.Result, error) {
	reason := agent.StopError
	if ctx.Err() != nil {
		reason = agent.StopCanceled
	}
	res := agent.Result{Output: r.out, Steps: r.steps, StopReason: reason}
	if reason == agent.StopError {
		_ = r.emit(trajectory.Event{Kind: trajectory.KindError, Step: r.steps, Error: &trajectory.Error{Kind: "agent", Message: err.Error()}})
	}
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: reason, Detail: err.Error()}})
	return res, err
}

// Package httpagent drives an agent behind a plain HTTP endpoint
// (target.agent.http): one request per user message, its JSON body built
// from body_template, the answer read at output_path of the JSON reply and
// the agent's steps at messages_path.
//
// The method is POST unless method says PUT or PATCH. Template: {{input}}, {{messages}} and {{task_id}} are replaced by JSON
// values: {{input}} (the user message) and {{task_id}} (record id and trial,
// "<record>/<trial>") by JSON strings, {{messages}} by the conversation so
// far, the current message included, as a JSON array of {"role",
// "content"}. A placeholder written inside quotes ("{{input}}") is replaced
// with its quotes, so both spellings give valid JSON. A template that is not
// valid JSON after substitution, or names another placeholder, is refused
// when the agent is built.
//
// Paths are dotted: object keys and decimal array indexes, e.g. output.text
// or choices.0.message.content. The empty output_path is the whole reply: a
// JSON string is the answer as is, other JSON its text, and a reply that is
// not JSON its raw text. A string value is the answer as is; a number or
// object is its JSON.
//
// messages_path names a list of messages shaped like chat messages:
// {"role", "content", "tool_calls", "tool_call_id", "name"}. content is a
// string or a list of parts whose "text" fields are joined; tool_calls
// entries are {"id", "function": {"name", "arguments"}} (OpenAI) or {"id",
// "name", "arguments"}, arguments a JSON string or a JSON value. Each
// assistant message is one step (a message event plus a tool_call event per
// call); tool messages become tool_result events; user and system messages
// are skipped (they are what was sent).
//
// The agent works outside the sandbox. Connection failures, non-2xx
// statuses and replies without the answer at output_path are
// infrastructure errors, never scores.
package httpagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/agent/remote"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// maxReply bounds a reply body.
const maxReply = 32 << 20

// Agent sends one HTTP request per user message.
type Agent struct {
	cfg    spec.HTTPAgent
	method string
	header http.Header
	hc     *http.Client
}

// New checks cfg (URL, method, template, headers_env) and returns the
// agent. Header values are read now through opts.Getenv (os.Getenv when
// nil); see remote.Headers.
func New(cfg spec.HTTPAgent, opts model.Options) (*Agent, error) {
	if err := remote.CheckURL("target.agent.http.url", cfg.URL, ""); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, method: strings.ToUpper(cfg.Method), hc: remote.HTTPClient(opts)}
	if a.method == "" {
		a.method = http.MethodPost
	}
	switch a.method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		// The message travels in the body, so only methods with one.
		return nil, fmt.Errorf("target.agent.http.method %q: use POST (the default), PUT or PATCH: the message is sent in the JSON body", cfg.Method)
	}
	if a.cfg.BodyTemplate == "" {
		a.cfg.BodyTemplate = DefaultBodyTemplate
	}
	sample := templateVars{Input: "x", TaskID: "r/0", Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "x"}}}
	if _, err := render(a.cfg.BodyTemplate, sample); err != nil {
		return nil, fmt.Errorf("target.agent.http.body_template: %w", err)
	}
	var err error
	a.header, err = remote.Headers("target.agent.http.headers_env", cfg.HeadersEnv, opts.Getenv)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Run sends the instruction (or the record's messages), then each reply of
// Task.User until it is done.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	c, err := remote.Start("http agent", &t)
	if err != nil {
		return agent.Result{}, err
	}
	taskID := fmt.Sprintf("%s/%d", t.RecordID, t.Trial)
	return c.Run(ctx, remote.Opening(t), func(ctx context.Context, conv []trajectory.Message) (remote.Answer, error) {
		answer, err := a.turn(ctx, c, templateVars{Input: conv[len(conv)-1].Content, Messages: conv, TaskID: taskID})
		return remote.Answer{Text: answer}, err
	})
}

// turn sends one request and records the reply's steps and answer.
func (a *Agent) turn(ctx context.Context, c *remote.Conversation, v templateVars) (string, error) {
	body, err := render(a.cfg.BodyTemplate, v)
	if err != nil {
		return "", fmt.Errorf("http agent: body_template: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, a.method, a.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("http agent: building the request: %w", err)
	}
	for k, vs := range a.header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("http agent: %s %s: %w", a.method, a.cfg.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return "", fmt.Errorf("http agent: reading the reply of %s: %w", a.cfg.URL, err)
	}
	if len(raw) > maxReply {
		return "", fmt.Errorf("http agent: the reply of %s is larger than %d MiB", a.cfg.URL, maxReply>>20)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", fmt.Errorf("http agent: %s %s answered %s: %s", a.method, a.cfg.URL, resp.Status, clip(strings.TrimSpace(string(raw)), 300))
	}
	ms := time.Since(start).Milliseconds()

	var doc any
	jsonErr := json.Unmarshal(raw, &doc)
	if jsonErr != nil && (a.cfg.OutputPath != "" || a.cfg.MessagesPath != "") {
		return "", fmt.Errorf("http agent: the reply of %s is not JSON (%v): %s", a.cfg.URL, jsonErr, clip(string(raw), 200))
	}
	var answer string
	switch {
	case jsonErr != nil:
		answer = string(raw)
	default:
		v, err := lookup(doc, a.cfg.OutputPath)
		if err != nil {
			return "", fmt.Errorf("http agent: output_path %q in the reply of %s: %w", a.cfg.OutputPath, a.cfg.URL, err)
		}
		answer = text(v)
	}

	lastAssistant := ""
	if a.cfg.MessagesPath != "" {
		v, err := lookup(doc, a.cfg.MessagesPath)
		if err != nil {
			return "", fmt.Errorf("http agent: messages_path %q in the reply of %s: %w", a.cfg.MessagesPath, a.cfg.URL, err)
		}
		msgs, err := parseMessages(v)
		if err != nil {
			return "", fmt.Errorf("http agent: messages_path %q in the reply of %s: %w", a.cfg.MessagesPath, a.cfg.URL, err)
		}
		// A tool message need not repeat its tool's name: it is the name
		// of the call it answers.
		names := map[string]string{}
		for _, m := range msgs {
			for _, tc := range m.ToolCalls {
				names[tc.ID] = tc.Name
			}
			if m.Role == trajectory.RoleTool && m.Name == "" {
				m.Name = names[m.ToolCallID]
			}
			if err := record(c, m); err != nil {
				return "", err
			}
			if m.Role == trajectory.RoleAssistant {
				lastAssistant = m.Content
			}
		}
	}
	// The answer is a message of its own unless the steps already ended
	// with it.
	if a.cfg.MessagesPath == "" || lastAssistant != answer {
		if a.cfg.MessagesPath == "" {
			c.Steps++
		}
		msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer}
		if err := c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, DurationMS: ms, Message: &msg}); err != nil {
			return "", err
		}
	}
	return answer, nil
}

// record emits one message of messages_path.
func record(c *remote.Conversation, m trajectory.Message) error {
	switch m.Role {
	case trajectory.RoleUser, trajectory.RoleSystem:
		return nil
	case trajectory.RoleTool:
		return c.Emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: c.Steps, ToolResult: &trajectory.ToolResult{CallID: m.ToolCallID, Name: m.Name, Output: m.Content}})
	}
	c.Steps++
	if err := c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, Message: &m}); err != nil {
		return err
	}
	for i := range m.ToolCalls {
		if err := c.Emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: c.Steps, ToolCall: &m.ToolCalls[i]}); err != nil {
			return err
		}
	}
	return nil
}

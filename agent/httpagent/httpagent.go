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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"evals.si/agent"
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
	log    *slog.Logger
}

// New checks cfg (URL, method, template, headers_env) and returns the
// agent. Header values are read now through opts.Getenv (os.Getenv when
// nil).
func New(cfg spec.HTTPAgent, opts model.Options) (*Agent, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target.agent.http.url %q is not an http(s) URL", cfg.URL)
	}
	a := &Agent{cfg: cfg, method: strings.ToUpper(cfg.Method), hc: opts.HTTPClient, log: opts.Logger}
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
	a.header, err = Headers("target.agent.http.headers_env", cfg.HeadersEnv, opts.Getenv)
	if err != nil {
		return nil, err
	}
	if a.hc == nil {
		a.hc = &http.Client{}
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a, nil
}

// Headers resolves headers_env (header name → worker variable) into
// headers. A variable that is unset or empty is an error naming the
// variable, never its value. A nil getenv means os.Getenv.
func Headers(field string, env map[string]string, getenv func(string) string) (http.Header, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	h := http.Header{}
	for name, v := range env {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, ": \r\n") {
			return nil, fmt.Errorf("%s: %q is not a header name", field, name)
		}
		val := getenv(v)
		if val == "" {
			return nil, fmt.Errorf("%s: header %s reads the worker variable %s, which is not set: export it where evalsi runs", field, name, v)
		}
		h.Set(name, val)
	}
	return h, nil
}

// Run sends the instruction (or the record's messages), then each reply of
// Task.User until it is done.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	if t.Emit == nil {
		return agent.Result{}, errors.New("http agent: task has no event sink")
	}
	r := &run{task: &t}
	conv := openingMessages(t)
	if len(conv) == 0 {
		return r.fail(ctx, fmt.Errorf("http agent: record %q has no instruction", t.RecordID))
	}
	for i := range conv {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &conv[i]}); err != nil {
			return r.fail(ctx, err)
		}
	}
	taskID := fmt.Sprintf("%s/%d", t.RecordID, t.Trial)
	for {
		input := conv[len(conv)-1].Content
		answer, err := a.turn(ctx, r, templateVars{Input: input, Messages: conv, TaskID: taskID})
		if err != nil {
			return r.fail(ctx, err)
		}
		r.out = answer
		conv = append(conv, trajectory.Message{Role: trajectory.RoleAssistant, Content: answer})
		if t.User == nil {
			break
		}
		next, done, err := t.User.Reply(ctx, conv)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("http agent: user simulator: %w", err))
		}
		if done {
			if err := r.userDone(next, conv); err != nil {
				return r.fail(ctx, err)
			}
			break
		}
		msg := trajectory.Message{Role: trajectory.RoleUser, Content: next}
		conv = append(conv, msg)
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &msg}); err != nil {
			return r.fail(ctx, err)
		}
	}
	return r.stop()
}

// openingMessages is the record's conversation when it has one ending in a
// user message (system messages included: the endpoint decides what to do
// with them), else the instruction as one user message.
func openingMessages(t agent.Task) []trajectory.Message {
	var out []trajectory.Message
	for _, m := range t.Input {
		out = append(out, trajectory.Message{Role: m.Role, Content: m.Content})
	}
	if len(out) > 0 && out[len(out)-1].Role == trajectory.RoleUser {
		return out
	}
	if strings.TrimSpace(t.Instruction) == "" {
		return nil
	}
	return []trajectory.Message{{Role: trajectory.RoleUser, Content: t.Instruction}}
}

// turn sends one request and records the reply's steps and answer.
func (a *Agent) turn(ctx context.Context, r *run, v templateVars) (string, error) {
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
		for _, m := range msgs {
			if err := r.record(m); err != nil {
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
			r.steps++
		}
		msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer}
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, DurationMS: ms, Message: &msg}); err != nil {
			return "", err
		}
	}
	return answer, nil
}

// run is the state of one Run.
type run struct {
	task   *agent.Task
	steps  int
	out    string
	detail string
}

// record emits one message of messages_path.
func (r *run) record(m trajectory.Message) error {
	switch m.Role {
	case trajectory.RoleUser, trajectory.RoleSystem:
		return nil
	case trajectory.RoleTool:
		return r.emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: r.steps, ToolResult: &trajectory.ToolResult{CallID: m.ToolCallID, Name: m.Name, Output: m.Content}})
	}
	r.steps++
	if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &m}); err != nil {
		return err
	}
	for i := range m.ToolCalls {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: r.steps, ToolCall: &m.ToolCalls[i]}); err != nil {
			return err
		}
	}
	return nil
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
	r.detail = fmt.Sprintf("the user is done after %d user turns", turns)
	if text == "" {
		return nil
	}
	return r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: text}})
}

func (r *run) stop() (agent.Result, error) {
	res := agent.Result{Output: r.out, Steps: r.steps, StopReason: agent.StopAnswered}
	return res, r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: agent.StopAnswered, Detail: r.detail}})
}

// fail records an infrastructure error (best effort) and returns it; a
// done context is a cancellation.
func (r *run) fail(ctx context.Context, err error) (agent.Result, error) {
	reason := agent.StopError
	if ctx.Err() != nil {
		reason = agent.StopCanceled
	}
	if reason == agent.StopError {
		_ = r.emit(trajectory.Event{Kind: trajectory.KindError, Step: r.steps, Error: &trajectory.Error{Kind: "agent", Message: err.Error()}})
	}
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: reason, Detail: err.Error()}})
	return agent.Result{Output: r.out, Steps: r.steps, StopReason: reason}, err
}

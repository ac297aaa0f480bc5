package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Mock is a canned tool (harness.builtin.tools.mocks[]): it answers from
// the spec, never runs anything, and keeps no state, so it is its own
// Provider and Session.
//
// Matching (docs/tools.md): the call's arguments and each
// responses[].arguments are compared as canonical JSON (see Canonical); the
// first entry whose arguments match exactly wins; an entry without
// arguments is the default, used when none matches; with no match and no
// default, the response field answers when set, else the call gets an error
// result listing the argument sets the tool knows.
type Mock struct {
	source string
	tool   model.Tool
	// fallback is the response field; hasFallback tells a set one apart.
	fallback    string
	hasFallback bool
	entries     []mockEntry
	def         *string
}

type mockEntry struct {
	args     string // canonical JSON
	response string
}

var (
	_ Provider = (*Mock)(nil)
	_ Session  = (*Mock)(nil)
)

// NewMock builds a mock tool from its spec; source is its place in the spec
// (harness.builtin.tools.mocks[i]).
func NewMock(source string, m spec.MockTool) (*Mock, error) {
	if m.Name == "" {
		return nil, fmt.Errorf("%s: a mock tool needs a name", source)
	}
	params := json.RawMessage(`{"type":"object"}`)
	if !m.Parameters.IsZero() {
		if t := bytes.TrimSpace(m.Parameters); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s.parameters: must be a JSON Schema object", source)
		}
		params = json.RawMessage(m.Parameters)
	}
	desc := m.Description
	if desc == "" {
		desc = "A tool named " + m.Name + "."
	}
	mk := &Mock{source: fmt.Sprintf("%s (mock %q)", source, m.Name),
		tool: model.Tool{Name: m.Name, Description: desc, Parameters: params}}
	if !m.Response.IsZero() {
		text, err := responseText(m.Response)
		if err != nil {
			return nil, fmt.Errorf("%s.response: %w", source, err)
		}
		mk.fallback, mk.hasFallback = text, true
	}
	for i, r := range m.Responses {
		text, err := responseText(r.Response)
		if err != nil {
			return nil, fmt.Errorf("%s.responses[%d].response: %w", source, i, err)
		}
		if r.Arguments.IsZero() {
			if mk.def == nil {
				mk.def = &text
			}
			continue
		}
		args, err := Canonical(r.Arguments)
		if err != nil {
			return nil, fmt.Errorf("%s.responses[%d].arguments: %w", source, i, err)
		}
		mk.entries = append(mk.entries, mockEntry{args: args, response: text})
	}
	if !mk.hasFallback && len(m.Responses) == 0 {
		return nil, fmt.Errorf("%s: mock tool %q needs response or responses", source, m.Name)
	}
	return mk, nil
}

// Source implements Provider.
func (m *Mock) Source() string { return m.source }

// Tools implements Provider.
func (m *Mock) Tools() []model.Tool { return []model.Tool{m.tool} }

// Open implements Provider: a mock has no per-trial state.
func (m *Mock) Open(context.Context) (Session, error) { return m, nil }

// Close implements Session.
func (m *Mock) Close() error { return nil }

// Call implements Session.
func (m *Mock) Call(_ context.Context, call trajectory.ToolCall) (trajectory.ToolResult, error) {
	res := trajectory.ToolResult{CallID: call.ID, Name: call.Name}
	raw := call.Arguments
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	args, err := Canonical(raw)
	if err != nil {
		res.IsError = true
		res.Output = fmt.Sprintf("invalid arguments for %s: %v; send a JSON object", m.tool.Name, err)
		return res, nil
	}
	for _, e := range m.entries {
		if e.args == args {
			res.Output = e.response
			return res, nil
		}
	}
	switch {
	case m.def != nil:
		res.Output = *m.def
	case m.hasFallback:
		res.Output = m.fallback
	default:
		known := make([]string, len(m.entries))
		for i, e := range m.entries {
			known[i] = e.args
		}
		res.IsError = true
		res.Output = fmt.Sprintf("%s has no response for the arguments %s; it answers these argument sets: %s", m.tool.Name, args, strings.Join(known, ", "))
	}
	return res, nil
}

// Canonical returns raw as canonical JSON: objects with their keys sorted
// (recursively), no insignificant whitespace, no HTML escaping, and numbers
// compared by value as 64-bit floats (1 and 1.0 are the same).
func Canonical(raw []byte) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("not valid JSON: %v", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// responseText is what the model gets for a canned response: a JSON string
// as its text, any other JSON as compact JSON text, null or absent as "".
func responseText(raw spec.JSON) (string, error) {
	if raw.IsZero() {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("not valid JSON: %v", err)
	}
	return b.String(), nil
}

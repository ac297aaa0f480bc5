package cli

import (
	"encoding/json"
	"slices"
	"strings"

	"evals.si/trajectory"
)

// redacted replaces env_from values in what the agent records.
const redacted = "[redacted]"

// minSecretLen: shorter values (a flag such as "1") are not redacted, since
// replacing them would garble every record while protecting nothing.
const minSecretLen = 6

// redactor replaces each secret, and its JSON-escaped form (tool arguments
// are raw JSON), with redacted; nil when there is nothing to redact.
func redactor(secrets []string) *strings.Replacer {
	var pairs []string
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= minSecretLen && !seen[s] {
			seen[s] = true
			pairs = append(pairs, s)
		}
	}
	for _, s := range secrets {
		add(s)
		if b, err := json.Marshal(s); err == nil {
			add(string(b[1 : len(b)-1]))
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	// Longest first, so a secret that contains another is replaced whole.
	slices.SortFunc(pairs, func(a, b string) int { return len(b) - len(a) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p, redacted)
	}
	return strings.NewReplacer(args...)
}

func (a *Agent) redactString(s string) string {
	if a.redact == nil {
		return s
	}
	return a.redact.Replace(s)
}

func (a *Agent) redactRaw(b json.RawMessage) json.RawMessage {
	if a.redact == nil || len(b) == 0 {
		return b
	}
	return json.RawMessage(a.redact.Replace(string(b)))
}

// redactEvent redacts the free text of e in place (the payloads are the
// event's own copies, made by the parsers).
func (a *Agent) redactEvent(e *trajectory.Event) {
	if a.redact == nil {
		return
	}
	if m := e.Message; m != nil {
		m.Content = a.redactString(m.Content)
		for i := range m.ToolCalls {
			m.ToolCalls[i].Arguments = a.redactRaw(m.ToolCalls[i].Arguments)
		}
	}
	if c := e.ToolCall; c != nil {
		c.Arguments = a.redactRaw(c.Arguments)
	}
	if r := e.ToolResult; r != nil {
		r.Output = a.redactString(r.Output)
	}
	if l := e.Log; l != nil {
		l.Text = a.redactString(l.Text)
	}
	if p := e.Policy; p != nil {
		p.Detail = a.redactString(p.Detail)
	}
	if s := e.Stop; s != nil {
		s.Detail = a.redactString(s.Detail)
	}
	if er := e.Error; er != nil {
		er.Message = a.redactString(er.Message)
	}
}

package traces

import (
	"encoding/json"
	"strings"
	"time"

	"evals.si/spec"
)

// Attributes a record is built from.
const (
	// GenAI semantic conventions: JSON arrays of {role, parts: [{type,
	// content}…]} messages (output messages add finish_reason), and the
	// system instructions as an array of parts.
	AttrInputMessages      = "gen_ai.input.messages"
	AttrOutputMessages     = "gen_ai.output.messages"
	AttrSystemInstructions = "gen_ai.system_instructions"
	// OpenInference: the span's input and output as text.
	AttrInputValue  = "input.value"
	AttrOutputValue = "output.value"
)

// message is a semconv input or output message. Content is the shape of
// older instrumentations (one string per message), read when parts are
// missing.
type message struct {
	Role    string `json:"role"`
	Parts   []part `json:"parts"`
	Content any    `json:"content"`
}

type part struct {
	Type    string `json:"type"`
	Content any    `json:"content"`
}

// record maps a root span to a record, or reports false when the span
// carries no usable input.
func record(s *Span, service string) (spec.Record, bool) {
	in, ok := input(s.Attributes)
	if !ok {
		return spec.Record{}, false
	}
	rec := spec.Record{ID: s.TraceID, Input: in}
	if out, ok := output(s.Attributes); ok {
		b, _ := json.Marshal(out)
		rec.Expected = b
	}
	meta, _ := json.Marshal(map[string]string{
		"trace_id": s.TraceID, "span_id": s.SpanID, "service": service, "name": s.Name,
		"start": s.Start.Format(time.RFC3339Nano),
	})
	rec.Metadata = map[string]spec.JSON{"trace": meta}
	return rec, true
}

// input reads gen_ai.input.messages (with gen_ai.system_instructions as a
// leading system message), else input.value.
func input(attrs map[string]any) (spec.Input, bool) {
	if msgs, ok := messages(attrs[AttrInputMessages]); ok {
		var out []spec.InputMessage
		if sys := partsText(decodeParts(attrs[AttrSystemInstructions])); sys != "" {
			out = append(out, spec.InputMessage{Role: "system", Content: sys})
		}
		for _, m := range msgs {
			if text := m.text(); text != "" {
				out = append(out, spec.InputMessage{Role: m.role(), Content: text})
			}
		}
		if len(out) > 0 {
			return spec.Input{Messages: out}, true
		}
	}
	if v, ok := attrs[AttrInputValue].(string); ok && strings.TrimSpace(v) != "" {
		return spec.Input{Text: v}, true
	}
	return spec.Input{}, false
}

// output reads the text of gen_ai.output.messages, else output.value.
func output(attrs map[string]any) (string, bool) {
	if msgs, ok := messages(attrs[AttrOutputMessages]); ok {
		var texts []string
		for _, m := range msgs {
			if t := m.text(); t != "" {
				texts = append(texts, t)
			}
		}
		if len(texts) > 0 {
			return strings.Join(texts, "\n"), true
		}
	}
	if v, ok := attrs[AttrOutputValue].(string); ok && v != "" {
		return v, true
	}
	return "", false
}

// messages decodes a messages attribute: a JSON string (how SDKs without
// structured attributes record it) or an OTLP array of kvlists.
func messages(v any) ([]message, bool) {
	raw, ok := rawJSON(v)
	if !ok {
		return nil, false
	}
	var msgs []message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, false
	}
	return msgs, len(msgs) > 0
}

func decodeParts(v any) []part {
	raw, ok := rawJSON(v)
	if !ok {
		return nil
	}
	var ps []part
	if json.Unmarshal(raw, &ps) != nil {
		return nil
	}
	return ps
}

func rawJSON(v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return []byte(v), strings.TrimSpace(v) != ""
	case []any:
		b, err := json.Marshal(v)
		return b, err == nil
	}
	return nil, false
}

func (m message) role() string {
	if m.Role == "" {
		return "user"
	}
	return m.Role
}

// text joins the message's text parts; tool calls, tool results and media
// have no place in a record's {role, content} input.
func (m message) text() string {
	if len(m.Parts) == 0 {
		s, _ := m.Content.(string)
		return s
	}
	return partsText(m.Parts)
}

func partsText(ps []part) string {
	var texts []string
	for _, p := range ps {
		if s, ok := p.Content.(string); ok && (p.Type == "text" || p.Type == "") && s != "" {
			texts = append(texts, s)
		}
	}
	return strings.Join(texts, "\n")
}

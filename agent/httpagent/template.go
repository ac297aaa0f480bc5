package httpagent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"evals.si/trajectory"
)

// DefaultBodyTemplate is the request body when body_template is not set.
const DefaultBodyTemplate = `{"input": {{input}}, "messages": {{messages}}, "task_id": {{task_id}}}`

// placeholder matches {{name}}, optionally inside a JSON string's quotes
// ("{{input}}"): either way the whole match is replaced by a JSON value, so
// both `{"q": {{input}}}` and `{"q": "{{input}}"}` give valid JSON.
var placeholder = regexp.MustCompile(`"\{\{\s*([A-Za-z_]+)\s*\}\}"|\{\{\s*([A-Za-z_]+)\s*\}\}`)

// templateVars are the values a body template can use.
type templateVars struct {
	Input    string
	Messages []trajectory.Message
	TaskID   string
}

// wireMessage is one entry of {{messages}}.
type wireMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// render substitutes the placeholders of tmpl, each as a JSON value:
// {{input}} and {{task_id}} as JSON strings, {{messages}} as a JSON array
// of {"role", "content"} objects. The result must be valid JSON.
func render(tmpl string, v templateVars) ([]byte, error) {
	var bad []string
	out := placeholder.ReplaceAllStringFunc(tmpl, func(m string) string {
		sub := placeholder.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		var val any
		switch name {
		case "input":
			val = v.Input
		case "task_id":
			val = v.TaskID
		case "messages":
			msgs := make([]wireMessage, 0, len(v.Messages))
			for _, m := range v.Messages {
				msgs = append(msgs, wireMessage{Role: m.Role, Content: m.Content})
			}
			val = msgs
		default:
			bad = append(bad, "{{"+name+"}}")
			return m
		}
		b, _ := json.Marshal(val)
		return string(b)
	})
	if len(bad) > 0 {
		return nil, fmt.Errorf("unknown placeholder(s) %s: the template can use {{input}}, {{messages}} and {{task_id}}", strings.Join(bad, ", "))
	}
	if !json.Valid([]byte(out)) {
		return nil, fmt.Errorf("the body is not valid JSON after substitution (placeholders become JSON values: write {\"q\": {{input}}}): %s", clip(out, 200))
	}
	return []byte(out), nil
}

// lookup follows a dotted path (output.text, choices.0.message.content)
// through decoded JSON: a segment indexes an object by key, or an array by
// a decimal index. The empty path is the value itself.
func lookup(v any, path string) (any, error) {
	if path == "" {
		return v, nil
	}
	cur := v
	for i, seg := range strings.Split(path, ".") {
		at := strings.Join(strings.Split(path, ".")[:i+1], ".")
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, fmt.Errorf("%s: no key %q", at, seg)
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(c) {
				return nil, fmt.Errorf("%s: %q is not an index of an array of %d", at, seg, len(c))
			}
			cur = c[n]
		default:
			return nil, fmt.Errorf("%s: cannot take %q of a %s", at, seg, jsonKind(cur))
		}
	}
	return cur, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, json.Number:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// text is a JSON value as an answer: a string as is, anything else (a
// number, an object) as its JSON.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

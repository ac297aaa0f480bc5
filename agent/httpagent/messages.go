package httpagent

import (
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/trajectory"
)

// parseMessages reads the value at messages_path: a list of chat-shaped
// messages (see the package comment).
func parseMessages(v any) ([]trajectory.Message, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list of messages, got a %s", jsonKind(v))
	}
	out := make([]trajectory.Message, 0, len(list))
	for i, item := range list {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("message %d is a %s, not an object", i, jsonKind(item))
		}
		role, _ := obj["role"].(string)
		if role == "" {
			return nil, fmt.Errorf("message %d has no role", i)
		}
		m := trajectory.Message{Role: normRole(role), Content: contentText(obj["content"])}
		m.ToolCallID, _ = obj["tool_call_id"].(string)
		m.Name, _ = obj["name"].(string)
		calls, _ := obj["tool_calls"].([]any)
		for j, c := range calls {
			tc, err := toolCall(c)
			if err != nil {
				return nil, fmt.Errorf("message %d, tool call %d: %w", i, j, err)
			}
			m.ToolCalls = append(m.ToolCalls, tc)
		}
		out = append(out, m)
	}
	return out, nil
}

// normRole maps common spellings onto the trajectory's roles.
func normRole(r string) string {
	switch strings.ToLower(r) {
	case "assistant", "ai", "agent", "model", "bot":
		return trajectory.RoleAssistant
	case "user", "human":
		return trajectory.RoleUser
	case "tool", "function":
		return trajectory.RoleTool
	case "system", "developer":
		return trajectory.RoleSystem
	}
	return r
}

// contentText is a message's content as text: a string, or the "text" of
// each part of a list, joined by newlines.
func contentText(v any) string {
	switch c := v.(type) {
	case nil:
		return ""
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			switch p := p.(type) {
			case string:
				parts = append(parts, p)
			case map[string]any:
				if t, ok := p["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return text(v)
}

// toolCall reads {"id", "function": {"name", "arguments"}} or {"id",
// "name", "arguments"}; arguments is a JSON string or a JSON value.
func toolCall(v any) (trajectory.ToolCall, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return trajectory.ToolCall{}, fmt.Errorf("a %s, not an object", jsonKind(v))
	}
	fn := obj
	if f, ok := obj["function"].(map[string]any); ok {
		fn = f
	}
	tc := trajectory.ToolCall{}
	tc.ID, _ = obj["id"].(string)
	tc.Name, _ = fn["name"].(string)
	if tc.Name == "" {
		return tc, fmt.Errorf("no name")
	}
	switch args := fn["arguments"].(type) {
	case nil:
	case string:
		if json.Valid([]byte(args)) {
			tc.Arguments = json.RawMessage(args)
		} else {
			b, _ := json.Marshal(args)
			tc.Arguments = b
		}
	default:
		b, _ := json.Marshal(args)
		tc.Arguments = b
	}
	return tc, nil
}

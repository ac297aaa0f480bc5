package external

import (
	"encoding/json"

	"evals.si/trajectory"
)

// Limits past which a tool call's arguments are handed to the harness as
// their raw JSON text (a JSON string) instead of a JSON value. A Python
// harness decodes the reply with json.loads, which raises RecursionError
// near 1000 levels and ValueError on an integer over 4300 digits; either
// would fail the trial as an infra error although it is the model's own
// output, which the harness must be able to grade.
const (
	maxArgumentDepth  = 100
	maxArgumentNumber = 4000
)

// decodableArguments replaces, in place, the arguments of msg's tool calls
// that a Python json.loads could not decode with their text.
func decodableArguments(msg *trajectory.Message) {
	for i := range msg.ToolCalls {
		raw := msg.ToolCalls[i].Arguments
		if len(raw) == 0 || !tooHardToDecode(raw) {
			continue
		}
		text, err := json.Marshal(string(raw))
		if err == nil {
			msg.ToolCalls[i].Arguments = text
		}
	}
}

// tooHardToDecode reports whether valid JSON text nests deeper than
// maxArgumentDepth or has a number literal longer than maxArgumentNumber.
func tooHardToDecode(raw []byte) bool {
	depth, number, inString, escaped := 0, 0, false, false
	for _, c := range raw {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			if number++; number > maxArgumentNumber {
				return true
			}
			continue
		}
		number = 0
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > maxArgumentDepth {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

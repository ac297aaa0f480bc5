package external

import (
	"encoding/json"
	"strings"
	"testing"

	"evals.si/trajectory"
)

func TestDecodableArguments(t *testing.T) {
	deep := func(n int) string { return `{"a": ` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	cases := []struct {
		name, args string
		asText     bool
	}{
		{"plain object", `{"path": "a.txt", "n": 3}`, false},
		{"brackets in strings do not count", `{"s": "` + strings.Repeat("[{", 500) + `\"]"}`, false},
		{"100 levels", `[` + deep(98) + `]`, false},
		{"101 levels", `[[` + deep(98) + `]]`, true},
		{"985 levels", deep(985), true},
		{"4000-digit number", `{"n": ` + strings.Repeat("9", 4000) + `}`, false},
		{"5000-digit number", `{"n": -` + strings.Repeat("9", 5000) + `}`, true},
		{"long digit string", `{"n": "` + strings.Repeat("9", 5000) + `"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := trajectory.Message{ToolCalls: []trajectory.ToolCall{{Name: "f", Arguments: json.RawMessage(c.args)}}}
			decodableArguments(&msg)
			got := msg.ToolCalls[0].Arguments
			if !c.asText {
				if string(got) != c.args {
					t.Fatalf("arguments changed to %.80s", got)
				}
				return
			}
			var text string
			if err := json.Unmarshal(got, &text); err != nil {
				t.Fatalf("arguments are not a JSON string: %v", err)
			}
			if text != c.args {
				t.Fatalf("the string is not the raw arguments: %.80s", text)
			}
		})
	}
}

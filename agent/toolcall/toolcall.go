// Package toolcall holds the tool-call protocols of the built-in agent for
// models without native (API-level) tool calling: the parsers that find
// tool calls in a model's text, the system prompt that states a protocol,
// the user message that carries tool results back, and the resolution of
// harness.builtin.tool_call_mode and tool_call_format into the protocol a
// run uses.
//
// Only the declared protocol is intercepted. Everything else in a reply —
// fenced Python, prose, a JSON example in the middle of a paragraph — is
// inert text and is never executed.
//
// The formats:
//
// tool_call_tags: a call is the text between strict <tool_call> and
// </tool_call> markers (exact, case-sensitive). The body is either a JSON
// object {"name": "<tool>", "arguments": {...}} (any tool; "parameters" is
// accepted for "arguments") or, when it is not such an object, a bare shell
// command, which is a call of bash. Every marker counts, in document order.
// A final call whose closing marker is missing (generation stopped at it, or
// ran out of tokens) still counts; a partial closing marker at the end is
// dropped. Empty markers are dropped. Special-token trailers (<|im_end|>,
// <|eot_id|>, <|end|>, </s> and the like) are stripped. A marker directly
// preceded by a backtick (`<tool_call>` quoted in prose) is inert, so a
// model can talk about the protocol. A body that is one fenced code block
// is unwrapped. JSON bodies are scanned brace by brace, so a "</tool_call>"
// inside a JSON string does not end the call.
//
// fenced_shell: every fenced code block (``` or ~~~) whose language is
// bash, sh, shell or console is one call of bash with the block's text as
// the command. Blocks of other languages, and blocks without a language,
// are inert. Prompts are stripped: in console blocks, lines starting with
// "$ " or "# " are the commands (with their "\" continuation lines) and the
// other lines are output, which is dropped; in the other shell blocks a
// leading "$ " is stripped when every non-blank line has one. A final block
// left open by the generation stop counts.
//
// native_json: the JSON call formats models are trained on:
// <|python_tag|>{...} (Llama 3.1+, several calls separated by ";"),
// Hermes-style <tool_call>{...}</tool_call> (Qwen, Hermes, many others),
// and a reply that is nothing but JSON calls (one object, several, or an
// array). A call object is {"name", "arguments" | "parameters"} or the
// OpenAI shape {"type":"function","function":{"name","arguments"}}.
//
// JSON in every format is found with a balanced-brace scan that knows
// strings and escapes, then leniently repaired: invalid escapes models emit
// (a backslash before "$", ".", "(" and so on) keep their backslash as a
// literal character, and raw control characters inside strings (a literal
// newline in a heredoc) are escaped. Arguments given as a JSON string that
// holds a JSON object are unwrapped.
package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/trajectory"
)

// Format is a textual tool-call protocol (harness.builtin.tool_call_format).
type Format string

// The formats.
const (
	FormatTags        Format = "tool_call_tags"
	FormatFencedShell Format = "fenced_shell"
	FormatNativeJSON  Format = "native_json"
)

// BashTool is the tool a bare shell command calls; its argument object is
// {"command": "..."}.
const BashTool = "bash"

// Parsed is what a parser found in one reply.
type Parsed struct {
	// Calls are the tool calls in document order, without IDs.
	Calls []trajectory.ToolCall
	// Problems describe calls the protocol marked but that could not be
	// read (for the model to correct); they are not run.
	Problems []string
}

// Parse finds the tool calls of format in a model's reply.
func Parse(format Format, text string) (Parsed, error) {
	switch format {
	case FormatTags:
		return ParseTags(text), nil
	case FormatFencedShell:
		return ParseFencedShell(text), nil
	case FormatNativeJSON:
		return ParseNativeJSON(text), nil
	}
	return Parsed{}, fmt.Errorf("unknown tool_call_format %q (one of tool_call_tags, fenced_shell, native_json)", format)
}

// specialTokens are end-of-turn and role tokens that servers without a
// chat-template-aware detokenizer leave in the text.
var specialTokens = []string{
	"<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|endoftext|>",
	"<|end_of_text|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|END_OF_TURN_TOKEN|>", "</s>",
}

// stripTrailers removes special tokens and whitespace from the end of s,
// repeatedly.
func stripTrailers(s string) string {
	for {
		t := strings.TrimRight(s, " \t\r\n")
		for _, tok := range specialTokens {
			t = strings.TrimSuffix(t, tok)
		}
		if t == s {
			return s
		}
		s = t
	}
}

// stripLeading removes whitespace and special tokens from the start of s.
func stripLeading(s string) string {
	for {
		t := strings.TrimLeft(s, " \t\r\n")
		for _, tok := range specialTokens {
			t = strings.TrimPrefix(t, tok)
		}
		if t == s {
			return s
		}
		s = t
	}
}

func bashCall(command string) trajectory.ToolCall {
	args, _ := json.Marshal(map[string]string{"command": command})
	return trajectory.ToolCall{Name: BashTool, Arguments: args}
}

// callFromObject reads a call object. ok is false when obj is not a call.
func callFromObject(obj map[string]json.RawMessage) (trajectory.ToolCall, bool) {
	if fn, has := obj["function"]; has {
		var inner map[string]json.RawMessage
		if json.Unmarshal(fn, &inner) == nil {
			if _, named := inner["name"]; named {
				obj = inner
			}
		}
	}
	var name string
	if raw, has := obj["name"]; !has || json.Unmarshal(raw, &name) != nil || strings.TrimSpace(name) == "" {
		return trajectory.ToolCall{}, false
	}
	args, has := obj["arguments"]
	if !has {
		args, has = obj["parameters"]
	}
	if !has || len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	// Arguments sent as a JSON string holding JSON (the OpenAI wire shape).
	var s string
	if json.Unmarshal(args, &s) == nil {
		if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") {
			if fixed, ok := repairJSON(t); ok {
				args = fixed
			}
		}
	}
	return trajectory.ToolCall{Name: strings.TrimSpace(name), Arguments: args}, true
}

// parseCallJSON parses text holding exactly one JSON call object.
func parseCallJSON(text string) (trajectory.ToolCall, bool) {
	fixed, ok := repairJSON(text)
	if !ok {
		return trajectory.ToolCall{}, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(fixed, &obj) != nil {
		return trajectory.ToolCall{}, false
	}
	return callFromObject(obj)
}

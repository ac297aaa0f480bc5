package toolcall

import (
	"encoding/json"
	"fmt"
	"strings"

	"evals.si/trajectory"
)

// PythonTag starts a Llama 3.1+ tool call.
const PythonTag = "<|python_tag|>"

// ParseNativeJSON parses the native_json protocol (see the package
// comment). The encodings are tried in turn: <|python_tag|> calls, Hermes
// <tool_call>{...}</tool_call> markers, then a reply that is only JSON.
func ParseNativeJSON(text string) Parsed {
	text = strings.TrimSpace(stripLeading(stripTrailers(text)))
	var p Parsed
	if strings.Contains(text, PythonTag) {
		for _, seg := range strings.Split(text, PythonTag)[1:] {
			calls, _, ok := jsonCalls(seg)
			if !ok {
				p.Problems = append(p.Problems, fmt.Sprintf("the %s call %q is not a JSON call object; it was not run", PythonTag, short(seg)))
				continue
			}
			p.Calls = append(p.Calls, calls...)
		}
		return p
	}
	if indexOpen(text, 0) >= 0 {
		for _, body := range tagBodies(text) {
			call, ok := parseCallJSON(body)
			if !ok {
				p.Problems = append(p.Problems, fmt.Sprintf("the call %q is not a JSON object {\"name\": ..., \"arguments\": {...}}; it was not run", short(body)))
				continue
			}
			p.Calls = append(p.Calls, call)
		}
		return p
	}
	// A bare JSON reply: the whole reply must be calls, so that a JSON
	// example inside prose stays inert.
	if strings.HasPrefix(text, "{") || strings.HasPrefix(text, "[") {
		if calls, rest, ok := jsonCalls(text); ok && strings.TrimSpace(rest) == "" {
			p.Calls = calls
		}
	}
	return p
}

// jsonCalls reads call objects (or arrays of them) from the start of s,
// separated by whitespace, ";" or ",". It returns the calls and the text
// that follows them, which the caller judges. ok is false when no call was
// read.
func jsonCalls(s string) (calls []trajectory.ToolCall, rest string, ok bool) {
	rest = s
	for {
		rest = strings.TrimLeft(stripLeading(rest), " \t\r\n;,")
		if rest == "" || (rest[0] != '{' && rest[0] != '[') {
			break
		}
		end, closed := scanValue(rest, 0)
		if !closed {
			break
		}
		got, good := callsOf(rest[:end])
		if !good {
			break
		}
		calls = append(calls, got...)
		rest = rest[end:]
	}
	return calls, rest, len(calls) > 0
}

// callsOf reads one JSON value: a call object or an array of them.
func callsOf(v string) ([]trajectory.ToolCall, bool) {
	fixed, ok := repairJSON(v)
	if !ok {
		return nil, false
	}
	if strings.HasPrefix(v, "[") {
		var arr []map[string]json.RawMessage
		if json.Unmarshal(fixed, &arr) != nil || len(arr) == 0 {
			return nil, false
		}
		var out []trajectory.ToolCall
		for _, o := range arr {
			c, ok := callFromObject(o)
			if !ok {
				return nil, false
			}
			out = append(out, c)
		}
		return out, true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(fixed, &obj) != nil {
		return nil, false
	}
	c, ok := callFromObject(obj)
	if !ok {
		return nil, false
	}
	return []trajectory.ToolCall{c}, true
}

package toolcall

import (
	"fmt"
	"strings"

	"evals.si/trajectory"
)

// The tool_call_tags markers.
const (
	OpenTag  = "<tool_call>"
	CloseTag = "</tool_call>"
)

// ParseTags parses the tool_call_tags protocol (see the package comment).
func ParseTags(text string) Parsed {
	var p Parsed
	for _, body := range tagBodies(text) {
		if call, ok := tagBodyCall(body); ok {
			p.Calls = append(p.Calls, call)
			continue
		}
		p.Problems = append(p.Problems, fmt.Sprintf("the call %q starts like a JSON object but is not {\"name\": ..., \"arguments\": {...}}; it was not run", short(body)))
	}
	return p
}

// tagBodies returns the non-empty bodies of the <tool_call> markers of
// text, in document order.
func tagBodies(text string) []string {
	text = stripTrailers(text)
	var bodies []string
	i := 0
	for {
		j := indexOpen(text, i)
		if j < 0 {
			return bodies
		}
		start := j + len(OpenTag)
		body, next := tagBody(text, start)
		i = next
		body = strings.TrimSpace(stripLeading(stripTrailers(body)))
		if body != "" {
			bodies = append(bodies, body)
		}
	}
}

// indexOpen finds the next opening marker at or after from that is not
// quoted with a backtick.
func indexOpen(text string, from int) int {
	for from < len(text) {
		k := strings.Index(text[from:], OpenTag)
		if k < 0 {
			return -1
		}
		j := from + k
		if j > 0 && text[j-1] == '`' {
			from = j + len(OpenTag)
			continue
		}
		return j
	}
	return -1
}

// tagBody returns the body of the marker whose text starts at start and the
// index to search on from.
func tagBody(text string, start int) (string, int) {
	rest := text[start:]
	// A JSON body ends where its object ends, so that a closing marker in
	// a string argument (a file being written) does not cut it.
	lead := len(rest) - len(strings.TrimLeft(rest, " \t\r\n"))
	if lead < len(rest) && rest[lead] == '{' {
		if end, ok := scanValue(rest, lead); ok {
			after := stripLeading(rest[end:])
			switch {
			case strings.HasPrefix(after, CloseTag):
				return rest[:end], len(text) - len(after) + len(CloseTag)
			case after == "":
				return rest[:end], len(text)
			}
		}
	}
	end := len(rest)
	next := len(text)
	if k := strings.Index(rest, CloseTag); k >= 0 {
		end, next = k, start+k+len(CloseTag)
	}
	// A second opening marker before the close ends an unclosed call.
	if k := indexOpen(rest[:end], 0); k >= 0 {
		end, next = k, start+k
	}
	body := rest[:end]
	if next == len(text) {
		body = trimPartialClose(body)
	}
	return body, next
}

// trimPartialClose drops a prefix of the closing marker left at the end of
// a truncated generation ("</tool_", "</").
func trimPartialClose(s string) string {
	t := strings.TrimRight(s, " \t\r\n")
	for n := len(CloseTag) - 1; n >= 2; n-- {
		if strings.HasSuffix(t, CloseTag[:n]) {
			return t[:len(t)-n]
		}
	}
	return s
}

// tagBodyCall reads one body: a JSON call object, or a shell command.
func tagBodyCall(body string) (trajectory.ToolCall, bool) {
	body = unwrapFence(body)
	if strings.HasPrefix(body, "{") {
		if call, ok := parseCallJSON(body); ok {
			return call, true
		}
		// A body meant as JSON ({"...) that is not a call object is
		// reported rather than run as a shell command; "{ cmd; }" and
		// other shell brace groups are still commands.
		if strings.HasPrefix(strings.TrimLeft(body[1:], " \t\r\n"), `"`) {
			return trajectory.ToolCall{}, false
		}
	}
	return bashCall(body), true
}

// unwrapFence returns the inside of s when s is exactly one fenced code
// block, else s.
func unwrapFence(s string) string {
	if !strings.HasPrefix(s, "```") && !strings.HasPrefix(s, "~~~") {
		return s
	}
	blocks := fences(s)
	if len(blocks) != 1 || !blocks[0].closed || strings.TrimSpace(s[blocks[0].end:]) != "" || blocks[0].start != 0 {
		return s
	}
	return strings.TrimSpace(blocks[0].body)
}

// short shortens s for a problem report.
func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}

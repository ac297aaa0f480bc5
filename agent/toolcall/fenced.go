package toolcall

import (
	"strings"
)

// shellLanguages are the fence languages fenced_shell runs.
var shellLanguages = map[string]bool{"bash": true, "sh": true, "shell": true, "console": true}

// ParseFencedShell parses the fenced_shell protocol (see the package
// comment).
func ParseFencedShell(text string) Parsed {
	var p Parsed
	for _, b := range fences(stripTrailers(text)) {
		if !shellLanguages[b.lang] {
			continue
		}
		var cmd string
		if b.lang == "console" {
			cmd = consoleCommands(b.body)
		} else {
			cmd = stripDollarPrompts(b.body)
		}
		if cmd = strings.TrimSpace(cmd); cmd != "" {
			p.Calls = append(p.Calls, bashCall(cmd))
		}
	}
	return p
}

// fence is one fenced code block.
type fence struct {
	start, end int // byte range of the block in the text, fences included
	lang       string
	body       string
	closed     bool
}

// fences returns the fenced code blocks of text (CommonMark-style: a line
// of three or more backticks or tildes, indented at most three spaces,
// opens a block; a line of at least as many of the same character closes
// it). A block still open at the end of the text runs to the end.
func fences(text string) []fence {
	var out []fence
	var cur *fence
	var marker string
	var indent int
	var body strings.Builder
	pos := 0
	for pos < len(text) {
		nl := strings.IndexByte(text[pos:], '\n')
		lineEnd := len(text)
		next := len(text)
		if nl >= 0 {
			lineEnd, next = pos+nl, pos+nl+1
		}
		line := strings.TrimSuffix(text[pos:lineEnd], "\r")
		if cur == nil {
			if m, ind, info, ok := openFence(line); ok {
				cur = &fence{start: pos, lang: language(info)}
				marker, indent = m, ind
				body.Reset()
			}
		} else if closesFence(line, marker) {
			cur.end, cur.closed, cur.body = next, true, body.String()
			out = append(out, *cur)
			cur = nil
		} else {
			body.WriteString(dedent(line, indent))
			body.WriteByte('\n')
		}
		pos = next
	}
	if cur != nil {
		cur.end, cur.body = len(text), body.String()
		out = append(out, *cur)
	}
	return out
}

func openFence(line string) (marker string, indent int, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	indent = len(line) - len(t)
	if indent > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return "", 0, "", false
	}
	n := 0
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 {
		return "", 0, "", false
	}
	info = strings.TrimSpace(t[n:])
	if t[0] == '`' && strings.Contains(info, "`") {
		return "", 0, "", false // inline code, not a fence
	}
	return t[:n], indent, info, true
}

func closesFence(line, marker string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	t = strings.TrimRight(t, " \t")
	return len(t) >= len(marker) && strings.Trim(t, marker[:1]) == ""
}

// language is the first word of a fence's info string, lower-cased
// ("bash title=x" and "{bash}" are bash).
func language(info string) string {
	f := strings.Fields(info)
	if len(f) == 0 {
		return ""
	}
	return strings.ToLower(strings.Trim(f[0], "{}."))
}

func dedent(line string, n int) string {
	for i := 0; i < n && strings.HasPrefix(line, " "); i++ {
		line = line[1:]
	}
	return line
}

// consoleCommands keeps the commands of a console transcript: lines with a
// "$ " or "# " prompt (stripped) and their "\" continuation lines; other
// lines are output. A block with no prompt at all is all commands.
func consoleCommands(body string) string {
	lines := strings.Split(body, "\n")
	hasPrompt := false
	for _, l := range lines {
		if promptOf(l) != "" {
			hasPrompt = true
			break
		}
	}
	if !hasPrompt {
		return body
	}
	var out []string
	continued := false
	for _, l := range lines {
		switch {
		case promptOf(l) != "":
			l = strings.TrimPrefix(strings.TrimLeft(l, " "), promptOf(l))
			out = append(out, l)
		case continued:
			out = append(out, l)
		default:
			continued = false
			continue
		}
		continued = strings.HasSuffix(strings.TrimRight(l, " \t"), `\`)
	}
	return strings.Join(out, "\n")
}

func promptOf(line string) string {
	t := strings.TrimLeft(line, " ")
	for _, p := range []string{"$ ", "# "} {
		if strings.HasPrefix(t, p) {
			return p
		}
	}
	if t == "$" || t == "#" {
		return t
	}
	return ""
}

// stripDollarPrompts strips a leading "$ " from every line when every
// non-blank line has one (a transcript written in a bash fence); "# " is a
// comment in bash and is kept.
func stripDollarPrompts(body string) string {
	lines := strings.Split(body, "\n")
	any := false
	for _, l := range lines {
		t := strings.TrimLeft(l, " ")
		if t == "" {
			continue
		}
		if !strings.HasPrefix(t, "$ ") {
			return body
		}
		any = true
	}
	if !any {
		return body
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(strings.TrimLeft(l, " "), "$ ")
	}
	return strings.Join(lines, "\n")
}

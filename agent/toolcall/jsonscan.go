package toolcall

import (
	"bytes"
	"encoding/json"
)

// scanValue returns the end (exclusive) of the JSON object or array that
// starts at s[start], which must be '{' or '['. It counts brackets outside
// strings and honours escapes inside them, so braces in strings do not
// count. ok is false when the value does not close before the end of s.
// It does not validate the JSON; repairJSON does.
func scanValue(s string, start int) (end int, ok bool) {
	if start >= len(s) || (s[start] != '{' && s[start] != '[') {
		return 0, false
	}
	depth := 0
	inString, escaped := false, false
	for i := start; i < len(s); i++ {
		c := s[i]
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
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// repairJSON makes model-written JSON valid where the intent is plain, and
// reports whether the result is valid JSON. Inside strings:
//   - an invalid escape (a backslash before anything but " \ / b f n r t
//     or u followed by four hex digits) keeps its backslash as a literal
//     character: `"echo \$HOME"` becomes the string `echo \$HOME`, which is
//     what the model wrote (a shell escape or a regex escape);
//   - raw control characters (a literal newline or tab) are escaped.
//
// Nothing outside strings is changed.
func repairJSON(s string) (json.RawMessage, bool) {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s), true
	}
	var b bytes.Buffer
	b.Grow(len(s) + 16)
	inString := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			b.WriteByte(c)
			continue
		}
		switch {
		case c == '"':
			inString = false
			b.WriteByte(c)
		case c == '\\':
			if i+1 < len(s) && validEscape(s, i+1) {
				b.WriteByte(c)
				b.WriteByte(s[i+1])
				i++
			} else {
				b.WriteString(`\\`)
			}
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	out := b.Bytes()
	if !json.Valid(out) {
		return nil, false
	}
	return out, true
}

// validEscape reports whether s[i] (the character after a backslash) makes
// a valid JSON escape.
func validEscape(s string, i int) bool {
	switch s[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if i+5 > len(s) {
			return false
		}
		for _, h := range []byte(s[i+1 : i+5]) {
			if !isHex(h) {
				return false
			}
		}
		return true
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

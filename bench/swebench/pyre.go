package swebench

import (
	"regexp"
	"strings"
	"unicode"
)

// SWE-bench's parsers are Python: str.strip/str.split/re with str patterns,
// whose character classes are Unicode-aware and slightly wider than Go's.
// These helpers give the Python meaning, so a port keeps the same edge cases
// (a \v or \x1c in a log, a non-ASCII digit or letter in a test name).

// pySpaceClass is the body of a character class matching what Python's
// str.isspace and re's \s match: Go's unicode.IsSpace plus \x1c-\x1f.
const pySpaceClass = `\t\n\v\f\r \x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}`

// pyWordClass is the body of a class matching Python's \w (str patterns):
// letters, numbers, underscore.
const pyWordClass = `\p{L}\p{N}_`

func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyStrip is str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyLStrip is str.lstrip().
func pyLStrip(s string) string { return strings.TrimLeftFunc(s, pyIsSpace) }

// pySplit is str.split() with no argument.
func pySplit(s string) []string { return strings.FieldsFunc(s, pyIsSpace) }

// pyre compiles a Python re pattern (str pattern, no flags other than those
// written inline) for Go: \s, \S, \d, \D, \w and \W get their Python
// (Unicode) meaning. Inside a character class only the positive escapes
// can be translated; a negated one there panics, so such patterns are
// written out by hand.
func pyre(pattern string) *regexp.Regexp {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c == '\\' && i+1 < len(pattern) {
			e := pattern[i+1]
			i++
			var body string
			neg := false
			switch e {
			case 's', 'S':
				body, neg = pySpaceClass, e == 'S'
			case 'd', 'D':
				body, neg = `\p{Nd}`, e == 'D'
			case 'w', 'W':
				body, neg = pyWordClass, e == 'W'
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
				continue
			}
			switch {
			case inClass && neg:
				panic("pyre: negated escape \\" + string(e) + " inside a class in " + pattern)
			case inClass:
				b.WriteString(body)
			case neg:
				b.WriteString("[^" + body + "]")
			default:
				b.WriteString("[" + body + "]")
			}
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' first in a class (or after '^') is literal.
			if i+1 < len(pattern) && pattern[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pattern) && pattern[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return regexp.MustCompile(b.String())
}

// pyres compiles several patterns with pyre.
func pyres(patterns ...string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		out[i] = pyre(p)
	}
	return out
}

// pyMatch is re.match(p, s): a match anchored at the start of s. p must
// have been compiled from a pattern that begins with ^ (the callers'
// patterns all do, or are wrapped in ^(?:...)).
func pyMatch(p *regexp.Regexp, s string) []string { return p.FindStringSubmatch(s) }

// pySlice is s[i:j] with Python's clamping for indexes past either end
// (negative indexes are not needed by the callers and clamp to 0).
func pySlice(s string, i, j int) string {
	i = max(0, min(i, len(s)))
	j = max(0, min(j, len(s)))
	if j < i {
		return ""
	}
	return s[i:j]
}

package swebench

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

var (
	pyFloatSyntax  = regexp.MustCompile(`^[+-]?(?:(?:\d(?:_?\d)*)?\.\d(?:_?\d)*|\d(?:_?\d)*\.?)(?:[eE][+-]?\d(?:_?\d)*)?$`)
	pyFloatSpecial = regexp.MustCompile(`^[+-]?(?i:inf|infinity|nan)$`)
)

// pyFloat is float(s) for a str: non-ASCII spaces become ' ' and
// non-ASCII decimal digits ASCII ones, ASCII whitespace is stripped, and
// what is left must be a decimal number (underscores between digits
// allowed) or inf, infinity or nan.
func pyFloat(s string) (float64, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case unicode.Is(unicode.Nd, r):
			// Unicode puts each script's digits in runs of ten from zero.
			start := r
			for unicode.Is(unicode.Nd, start-1) {
				start--
			}
			b.WriteByte('0' + byte((r-start)%10))
		default:
			return 0, fmt.Errorf("could not convert string to float: %q", s)
		}
	}
	t := strings.Trim(b.String(), " \t\n\v\f\r")
	switch {
	case pyFloatSpecial.MatchString(t):
		if strings.HasSuffix(strings.ToLower(t), "nan") {
			return math.NaN(), nil
		}
		if strings.HasPrefix(t, "-") {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	case pyFloatSyntax.MatchString(t):
		f, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
		if err != nil && !math.IsInf(f, 0) {
			return 0, err
		}
		return f, nil // overflow is inf, as Python's
	}
	return 0, fmt.Errorf("could not convert string to float: %q", s)
}

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

package spec

import (
	"strings"

	"github.com/agnivade/levenshtein"
)

// suggest returns the candidate closest to word, or "" when none is close
// enough to be a likely typo. "Close enough" scales with the word's length:
// two edits for short words, a third of the length for long ones, so that
// setup_netwrk finds setup_network but "foo" does not find "env".
func suggest(word string, candidates []string) string {
	best, bestD := "", -1
	lw := strings.ToLower(word)
	for _, c := range candidates {
		dist := levenshtein.ComputeDistance(lw, strings.ToLower(c))
		if bestD < 0 || dist < bestD {
			best, bestD = c, dist
		}
	}
	if best == "" || bestD == 0 && word == best {
		return ""
	}
	limit := max(2, len(word)/3)
	if bestD > limit || bestD >= len(word) || bestD >= len(best) {
		return stemMatch(lw, candidates)
	}
	return best
}

// stemMatch finds the one candidate that shares a stem with word: a common
// prefix of at least three letters covering most of the shorter of the
// two, so that "denied" finds "deny" and "allowed" finds "allow", which
// are too many edits apart for suggest. Two such candidates are no
// suggestion.
func stemMatch(lw string, candidates []string) string {
	found := ""
	for _, c := range candidates {
		lc := strings.ToLower(c)
		n := 0
		for n < len(lw) && n < len(lc) && lw[n] == lc[n] {
			n++
		}
		if n < 3 || 4*n < 3*min(len(lw), len(lc)) {
			continue
		}
		if found != "" {
			return ""
		}
		found = c
	}
	return found
}

// oneOf formats valid values for a hint: "use one of deny, allowlist, allow".
func oneOf(values []string) string {
	return "use one of " + strings.Join(values, ", ")
}

// enumHint is the hint for a bad enum value: a suggestion when one is
// close, and the valid values always.
func enumHint(got string, values []string) string {
	if s := suggest(got, values); s != "" {
		return "did you mean \"" + s + "\"? " + oneOf(values)
	}
	return oneOf(values)
}

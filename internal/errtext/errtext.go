// Package errtext fits error messages into one-line displays (a progress
// line, a table cell, a log line) without losing their root cause.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// gap marks where OneLine dropped the middle of a message.
const gap = " … "

// OneLine returns msg on one line of at most n bytes. A Go error chain reads
// "what was being done: ...: root cause", so when msg is too long OneLine
// keeps its start and its end, the root cause ("lookup api.example.com: no
// such host"), and drops segments from the middle; cutting only the end
// would lose the cause. Whitespace runs, newlines included, become one
// space. n <= 0 means no limit.
func OneLine(msg string, n int) string {
	s := strings.Join(strings.Fields(msg), " ")
	if n <= 0 || len(s) <= n {
		return s
	}
	budget := n - len(gap)
	if budget < 16 {
		return cut(s, n)
	}
	// The end: the longest run of whole trailing segments that fits in
	// two thirds of the room, or the last two thirds' worth of bytes.
	tailRoom := budget * 2 / 3
	tail := ""
	for i := len(s); ; {
		j := strings.LastIndex(s[:i], ": ")
		if j < 0 || len(s)-(j+2) > tailRoom {
			break
		}
		tail, i = s[j+2:], j
	}
	if tail == "" {
		start := len(s) - tailRoom
		for start < len(s) && !utf8.RuneStart(s[start]) {
			start++
		}
		tail = s[start:]
	}
	// The start: whole leading segments that fit in what is left, or as
	// many bytes as fit.
	headRoom := budget - len(tail)
	head := cut(s, headRoom)
	if i := strings.LastIndex(head, ": "); i > 0 && len(head) < len(s) {
		head = head[:i]
	}
	return head + gap + tail
}

// cut is the first n bytes of s, ending on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

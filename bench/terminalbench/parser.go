package terminalbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"evals.si/checker"
	"evals.si/sandbox"
	"evals.si/spec"
)

// Parser names registered by RegisterParsers.
const (
	ParserPytest   = "evalsi_terminalbench:pytest"
	ParserSWEBench = "evalsi_terminalbench:swebench"
)

// RegisterParsers adds Terminal-Bench's graders to reg.
func RegisterParsers(reg *checker.Registry) {
	reg.Register(ParserPytest, pytestVerdict)
	reg.Register(ParserSWEBench, swebenchVerdict)
}

// Status is a test's status after Terminal-Bench's mapping.
type Status string

const (
	Passed Status = "passed"
	Failed Status = "failed"
)

// ErrNoSummary is Terminal-Bench's PARSE_ERROR for the pytest parser: the
// output has no "short test summary info" header.
var ErrNoSummary = errors.New("no pytest \"short test summary info\" section in the test output (Terminal-Bench: PARSE_ERROR)")

// summaryHeader is SHORT_TEST_SUMMARY_INFO_PATTERN with re.IGNORECASE;
// Python's \s (str patterns) also matches Unicode spaces and \x1c-\x1f.
var summaryHeader = regexp.MustCompile(`(?i)=+` + pySpaces + `*short test summary info` + pySpaces + `*=+`)

// pySpaces is a class matching what Python's str.isspace and re's \s match.
const pySpaces = `[\t\n\v\f\r \x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyStrip is str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pytestStatuses are the members of Terminal-Bench's PytestTestStatus and
// what they map to. UNKNOWN lines are dropped by the parser, so it never
// reaches the mapping.
var pytestStatuses = map[string]Status{
	"PASSED":  Passed,
	"XFAIL":   Passed,
	"SKIPPED": Passed,
	"FAILED":  Failed,
	"XPASS":   Failed,
	"ERROR":   Failed,
	"UNKNOWN": "",
}

// ParsePytest is Terminal-Bench 0.2.18's PytestParser.parse: split once on the
// short test summary header (ErrNoSummary when it is absent), then read one
// "STATUS path::name" per line. FAILED lines lose their last " - "
// description; the name is what follows the first "::"; a later line for
// the same name wins.
func ParsePytest(content string) (map[string]Status, error) {
	loc := summaryHeader.FindStringIndex(content)
	if loc == nil {
		return nil, ErrNoSummary
	}
	results := map[string]Status{}
	for _, line := range pySplitLines(content[loc[1]:]) {
		if strings.HasPrefix(line, "FAILED") {
			if parts := strings.Split(line, " - "); len(parts) > 1 {
				line = strings.Join(parts[:len(parts)-1], " - ")
			}
		}
		parts := pySplitMax1(line)
		if len(parts) <= 1 {
			continue
		}
		status := strings.Trim(pyStrip(parts[0]), ":")
		st, ok := pytestStatuses[status]
		if !ok || status == "UNKNOWN" {
			continue
		}
		path := pyStrip(parts[1])
		name := path
		if _, after, found := strings.Cut(path, "::"); found {
			name = after
		}
		if name == "" {
			continue
		}
		results[name] = st
	}
	return results, nil
}

// Resolved is Terminal-Bench's is_resolved: every parsed test passed. An
// empty result is resolved, as Python's all([]) is true.
func Resolved(results map[string]Status) bool {
	for _, s := range results {
		if s != Passed {
			return false
		}
	}
	return true
}

// ParseSWEBench is Terminal-Bench 0.2.18's SWEBenchParser: both markers
// must be somewhere in the output (a parse error otherwise); the block is
// what follows the first start marker up to the last end marker after it
// (all of it when there is none after it), and the single test passes when
// the block is exactly PASSED after stripping.
func ParseSWEBench(content string) (map[string]Status, error) {
	const start, end = "SWEBench results starts here", "SWEBench results ends here"
	for _, m := range []string{start, end} {
		if !strings.Contains(content, m) {
			return nil, fmt.Errorf("no %q marker in the test output (Terminal-Bench: PARSE_ERROR)", m)
		}
	}
	_, block, _ := strings.Cut(content, start)
	if j := strings.LastIndex(block, end); j >= 0 {
		block = block[:j]
	}
	if pyStrip(block) == "PASSED" {
		return map[string]Status{"tests": Passed}, nil
	}
	return map[string]Status{"tests": Failed}, nil
}

// PaneWidth is the width of the tmux pane Terminal-Bench captures the test
// output from; capture-pane without -J wraps longer lines.
const PaneWidth = 160

var ansi = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// Pane turns command output into what `tmux capture-pane -p` returns for
// it: escape sequences gone, carriage returns resolved, lines wrapped at
// PaneWidth columns and trailing blanks trimmed.
func Pane(out string) string {
	out = ansi.ReplaceAllString(out, "")
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if i := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); i >= 0 {
			line = line[i+1:]
		}
		line = strings.TrimRight(line, "\r")
		r := []rune(line)
		for len(r) > PaneWidth {
			b.WriteString(string(r[:PaneWidth]))
			b.WriteByte('\n')
			r = r[PaneWidth:]
		}
		b.WriteString(strings.TrimRight(string(r), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

func pytestVerdict(_ context.Context, res sandbox.ExecResult, _ checker.Sandbox, _ string, _ spec.JSON) (checker.Verdict, error) {
	return verdict(res, ParsePytest)
}

func swebenchVerdict(_ context.Context, res sandbox.ExecResult, _ checker.Sandbox, _ string, _ spec.JSON) (checker.Verdict, error) {
	return verdict(res, ParseSWEBench)
}

// verdict grades as Terminal-Bench does: a parse error leaves the trial
// unresolved (it is counted, as a failure, not dropped).
func verdict(res sandbox.ExecResult, parse func(string) (map[string]Status, error)) (checker.Verdict, error) {
	if bytes.Contains(res.Stdout, []byte(TestsTimedOut)) {
		return checker.Verdict{Pass: false, Score: 0, Details: "unresolved: run-tests.sh ran past max_test_timeout_sec (Terminal-Bench: TEST_TIMEOUT, the output is not parsed)"}, nil
	}
	pane := Pane(string(res.Stdout) + string(res.Stderr))
	results, err := parse(pane)
	if err != nil {
		return checker.Verdict{Pass: false, Score: 0, Details: "unresolved: " + err.Error()}, nil
	}
	ok := Resolved(results)
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	passed := 0
	for _, n := range names {
		if results[n] == Passed {
			passed++
		}
		fmt.Fprintf(&b, "\n%s: %s", n, results[n])
	}
	v := checker.Verdict{Pass: ok, Details: fmt.Sprintf("%d/%d tests passed%s", passed, len(results), b.String())}
	if ok {
		v.Score = 1
	}
	return v, nil
}

// pySplitLines is Python's str.splitlines().
func pySplitLines(s string) []string {
	var out []string
	rs := []rune(s)
	var cur []rune
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '\r':
			out = append(out, string(cur))
			cur = cur[:0]
			if i+1 < len(rs) && rs[i+1] == '\n' {
				i++
			}
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) > 0 {
		out = append(out, string(cur))
	}
	return out
}

// pySplitMax1 is Python's str.split(maxsplit=1).
func pySplitMax1(s string) []string {
	s = strings.TrimLeftFunc(s, pyIsSpace)
	if s == "" {
		return nil
	}
	i := strings.IndexFunc(s, pyIsSpace)
	if i < 0 {
		return []string{s}
	}
	rest := strings.TrimLeftFunc(s[i:], pyIsSpace)
	if rest == "" {
		return []string{s[:i]}
	}
	return []string{s[:i], rest}
}

package swebench

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// JavaScript log parsers: swebench 5.0.2's harness/log_parsers/javascript.py,
// ported line for line. Where the Python raises (an AttributeError on a
// failed re.match, an IndexError on an empty list), the port returns an
// error: the harness then fails the instance rather than grading it.

// ansiEscape is swebench.harness.utils.ansi_escape.
var ansiEscapeRe = regexp.MustCompile(`\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])`)

func ansiEscape(s string) string { return ansiEscapeRe.ReplaceAllString(s, "") }

func indentOf(line string) int {
	return utf8.RuneCountInString(line) - utf8.RuneCountInString(pyLStrip(line))
}

var (
	calypsoMs       = pyre(`\(\d+ms\)`)
	calypsoPassMs   = pyre(`^\s+✓\s(.*)\(\d+ms\)$`)
	calypsoPass     = pyre(`^\s+✓\s(.*)`)
	calypsoFailMs   = pyre(`^\s+✕\s(.*)\(\d+ms\)$`)
	calypsoFail     = pyre(`^\s+✕\s(.*)`)
	calypsoSplitter = " ./node_modules/.bin/jest "
)

// parseCalypso is parse_log_calypso: each jest run's output after the
// " ./node_modules/.bin/jest " command, up to its summary; tests named by
// their indentation-nested describe blocks joined with " - ".
func parseCalypso(log string) (map[string]string, error) {
	type level struct {
		name   string
		indent int
	}
	sm := map[string]string{}
	var suite []level
	testName := func(pattern *regexp.Regexp, line string) (string, error) {
		m := pyMatch(pattern, line)
		if m == nil {
			return "", fmt.Errorf("parse_log_calypso: line %q does not match %s (the harness raises AttributeError)", line, pattern)
		}
		names := make([]string, len(suite))
		for i, l := range suite {
			names[i] = l.name
		}
		return pyStrip(strings.Join(names, " - ") + " - " + m[1]), nil
	}
	chunks := strings.Split(log, calypsoSplitter)
	for _, chunk := range chunks[1:] {
		for _, line := range strings.Split(chunk, "\n") {
			if strings.HasPrefix(line, "Test Suites") || strings.HasPrefix(line, "  ● ") {
				break
			}
			s := pyStrip(line)
			switch {
			case strings.HasPrefix(s, "✓"), strings.HasPrefix(s, "✕"):
				pass := strings.HasPrefix(s, "✓")
				var p *regexp.Regexp
				switch {
				case pass && calypsoMs.MatchString(line):
					p = calypsoPassMs
				case pass:
					p = calypsoPass
				case calypsoMs.MatchString(line):
					p = calypsoFailMs
				default:
					p = calypsoFail
				}
				name, err := testName(p, line)
				if err != nil {
					return nil, err
				}
				if pass {
					sm[name] = StatusPassed
				} else {
					sm[name] = StatusFailed
				}
			case indentOf(line) > 0:
				in := indentOf(line)
				if len(suite) == 0 {
					suite = []level{{s, in}}
					continue
				}
				for len(suite) > 0 && suite[len(suite)-1].indent >= in {
					suite = suite[:len(suite)-1]
				}
				suite = append(suite, level{s, in})
			}
		}
	}
	return sm, nil
}

// chartJSFailure is `Chrome\s[\d\.]+[^\S\r\n]\(.+?\)[^\S\r\n](.*)FAILED$`
// (re.MULTILINE); [^\S\r\n] is whitespace other than \r and \n.
var chartJSFailure = regexp.MustCompile(`(?m)Chrome[` + pySpaceClass + `][\p{Nd}\.]+[\t\v\f \x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]\(.+?\)[\t\v\f \x1c-\x1f\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}](.*)FAILED$`)

// parseChartJS is parse_log_chart_js: Karma's "Chrome 1.2 (Linux) name
// FAILED" lines; passing tests are not listed (Chart.js is FAIL_ONLY).
func parseChartJS(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, m := range chartJSFailure.FindAllStringSubmatch(ansiEscape(log), -1) {
		sm[m[1]] = StatusFailed
	}
	return sm, nil
}

var markedFailure = pyre(`^\d+\)\s(.*)`)

// parseMarked is parse_log_marked: numbered "1) name" failures.
func parseMarked(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if m := markedFailure.FindStringSubmatch(line); m != nil {
			sm[pyStrip(m[1])] = StatusFailed
		}
	}
	return sm, nil
}

var p5jsFail = pyre(`(?ms)^\s*(\d+)\)(.{0,1000}?):`)

// parseP5JS is parse_log_p5js: mocha's numbered failures, after JSON and
// XML blocks are removed from the log; a failure's title lines must each
// be indented more than the one before.
func parseP5JS(log string) (map[string]string, error) {
	log = removeXMLBlocks(removeJSONBlocks(ansiEscape(log)))
	sm := map[string]string{}
	for _, m := range p5jsFail.FindAllStringSubmatch(log, -1) {
		if !p5jsValidFail(m[2]) {
			continue
		}
		names := strings.Split(m[2], "\n")
		for i, n := range names {
			names[i] = pyStrip(n)
		}
		sm[strings.Join(names, ":")] = StatusFailed
	}
	return sm, nil
}

func p5jsValidFail(title string) bool {
	last := 0
	for _, line := range strings.Split(title, "\n") {
		in := indentOf(line)
		if in <= last {
			return false
		}
		last = in
	}
	return true
}

// removeJSONBlocks is parse_log_p5js's remove_json_blocks.
func removeJSONBlocks(log string) string {
	var kept []string
	inBlock, inList := false, false
	for _, line := range strings.Split(log, "\n") {
		s := strings.TrimRightFunc(line, pyIsSpace)
		switch {
		case strings.HasSuffix(s, "{"):
			inBlock = true
			continue
		case strings.HasSuffix(s, "["):
			inList = true
			continue
		case s == "}" && inBlock:
			inBlock = false
			continue
		case s == "]" && inList:
			inList = false
			continue
		case inBlock || inList:
			continue
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			continue
		case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}

// removeXMLBlocks is parse_p5js's remove_xml_blocks: while the log has a
// `<(\w+)>[\s\S]*?<\/\1>` match (the leftmost, the shortest), it is
// replaced by as many "<tag>" as it held beyond the first. RE2 has no
// backreferences, so the search is written out.
func removeXMLBlocks(log string) string {
	for {
		start, end, tag, ok := findXMLBlock(log)
		if !ok {
			return log
		}
		opening := max(strings.Count(log[start:end], "<"+tag+">")-1, 0)
		log = log[:start] + strings.Repeat("<"+tag+">", opening) + log[end:]
	}
}

var xmlOpenTag = pyre(`^<(\w+)>`)

func findXMLBlock(s string) (start, end int, tag string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] != '<' {
			continue
		}
		// \w+ is greedy and a shorter run is followed by a word
		// character, never '>': only the whole run can match.
		m := xmlOpenTag.FindStringSubmatch(s[i:])
		if m == nil {
			continue
		}
		after := i + len(m[0])
		closing := "</" + m[1] + ">"
		if j := strings.Index(s[after:], closing); j >= 0 {
			return i, after + j + len(closing), m[1], true
		}
	}
	return 0, 0, "", false
}

var reactPDFPatterns = []statusPattern{
	{pyre(`^PASS\s(.*)\s\([\d\.]+ms\)`), StatusPassed},
	{pyre(`^PASS\s(.*)\s\([\d\.]+\ss\)`), StatusPassed},
	{pyre(`^PASS\s(.*)\s\([\d\.]+s\)`), StatusPassed},
	{pyre(`^PASS\s(.*)`), StatusPassed},
	{pyre(`^FAIL\s(.*)\s\([\d\.]+ms\)`), StatusFailed},
	{pyre(`^FAIL\s(.*)\s\([\d\.]+\ss\)`), StatusFailed},
	{pyre(`^FAIL\s(.*)\s\([\d\.]+s\)`), StatusFailed},
	{pyre(`^FAIL\s(.*)`), StatusFailed},
}

// parseReactPDF is parse_log_react_pdf: jest's per-file "PASS|FAIL path
// (1.2 s)" lines, the first pattern that matches deciding.
func parseReactPDF(log string) (map[string]string, error) {
	return firstPatternPerLine(log, reactPDFPatterns), nil
}

// firstPatternPerLine gives each line's first match the pattern's status,
// the test named by its first group.
func firstPatternPerLine(log string, patterns []statusPattern) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		for _, p := range patterns {
			if m := p.re.FindStringSubmatch(line); m != nil {
				sm[m[1]] = p.status
				break
			}
		}
	}
	return sm
}

// statusPattern is a line pattern and the status its match gives.
type statusPattern struct {
	re     *regexp.Regexp
	status string
}

var jestJSONLine = pyre(`^\[(PASSED|FAILED)\]\s(.+)$`)

// parseJestJSON is parse_log_jest_json: "[PASSED] full name" lines, which
// the eval script makes from jest --json.
func parseJestJSON(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(jestJSONLine, pyStrip(line))
		if m == nil {
			continue
		}
		if m[1] == "PASSED" {
			sm[m[2]] = StatusPassed
		} else {
			sm[m[2]] = StatusFailed
		}
	}
	return sm, nil
}

var vitestLine = pyre(`^\s*(✓|×|↓)\s(.+?)(?:\s(\d+\s*m?s?|\[skipped\]))?$`)

// parseVitest is parse_log_vitest (--reporter=verbose).
func parseVitest(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(vitestLine, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[1] {
		case "✓":
			sm[m[2]] = StatusPassed
		case "×":
			sm[m[2]] = StatusFailed
		case "↓":
			sm[m[2]] = StatusSkipped
		}
	}
	return sm, nil
}

var karmaLine = pyre(`^(\s*)?([✔✖])?\s(.*)$`)

// parseKarma is parse_log_karma: after "Starting browser", indented lines
// without a mark open (deeper) or close (shallower) describe blocks;
// "✔|✖ name" lines are tests named "block > … > name"; SUMMARY: ends.
func parseKarma(log string) (map[string]string, error) {
	sm := map[string]string{}
	indent := -1
	var suite []string
	started := false
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "SUMMARY:") {
			return sm, nil
		}
		if strings.Contains(line, "Starting browser") {
			started = true
			continue
		}
		if !started {
			continue
		}
		m := pyMatch(karmaLine, line)
		if m == nil {
			continue
		}
		lead, status, name := m[1], m[2], m[3]
		if lead != "" && status == "" {
			n := utf8.RuneCountInString(lead)
			if n > indent {
				indent = n
				suite = append(suite, name)
			} else if n < indent {
				indent = n
				if len(suite) == 0 {
					return nil, fmt.Errorf("parse_log_karma: line %q closes a describe block that is not open (the harness raises IndexError)", line)
				}
				suite = suite[:len(suite)-1]
				continue
			}
		}
		if status == "✔" || status == "✖" {
			full := strings.Join(append(slices.Clone(suite), name), " > ")
			if status == "✔" {
				sm[full] = StatusPassed
			} else {
				sm[full] = StatusFailed
			}
		}
	}
	return sm, nil
}

var tapLine = pyre(`^(ok|not ok) (\d+) (.+)$`)

// parseTap is parse_log_tap: "ok 1 name" / "not ok 2 name".
func parseTap(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(tapLine, pyStrip(line))
		if m == nil {
			continue
		}
		if m[1] == "ok" {
			sm[m[3]] = StatusPassed
		} else {
			sm[m[3]] = StatusFailed
		}
	}
	return sm, nil
}

// immutableJSParser is parse_log_immutable_js's choice by the PR number
// (the last "-"-separated part of the instance id).
func immutableJSParser(instanceID string) (string, error) {
	parts := strings.Split(instanceID, "-")
	switch parts[len(parts)-1] {
	case "2006":
		return "parse_log_jest", nil
	case "2005":
		return "parse_log_jest_json", nil
	}
	return "", fmt.Errorf("parse_log_immutable_js: unknown instance id %s (the harness raises ValueError; it knows PRs 2005 and 2006)", instanceID)
}

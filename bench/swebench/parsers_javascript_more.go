package swebench

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"evals.si/bench/internal/pystr"
)

// The rest of swebench 5.0.2's javascript.py registry: the parsers of the
// repositories SWE-bench Multimodal and its later JavaScript sets added.
// Ported line for line, as parsers_javascript.go; where the Python raises,
// the port returns an error.

// suiteLevel is a describe block the indentation-tracking parsers are in.
type suiteLevel struct {
	name   string
	indent int
}

// enterSuite is the suite bookkeeping the Python repeats in several
// parsers: an indented line that is not a test opens a block, closing
// those at its indentation or deeper.
func enterSuite(suite []suiteLevel, line string) []suiteLevel {
	in := indentOf(line)
	if len(suite) == 0 {
		return []suiteLevel{{pyStrip(line), in}}
	}
	for len(suite) > 0 && suite[len(suite)-1].indent >= in {
		suite = suite[:len(suite)-1]
	}
	return append(suite, suiteLevel{pyStrip(line), in})
}

func suiteName(suite []suiteLevel, test, sep string) string {
	names := make([]string, 0, len(suite)+1)
	for _, l := range suite {
		names = append(names, l.name)
	}
	return strings.Join(append(names, test), sep)
}

var (
	highlightSummary = pyre(`\n[ \t]*\d+ passing`)
	highlightTiming  = pyre(`\(\d+ms\)`)
	highlightFailure = pyre(`^\d+\)`)
)

// parseHighlightJS is parse_log_highlightjs (mocha): everything from the
// first "N passing" line on is dropped; "✓|✔ name" passes and "N) name"
// fails, named by the current suite (a line indented by two spaces) and
// the test joined with ".".
func parseHighlightJS(log string) (map[string]string, error) {
	if loc := highlightSummary.FindStringIndex(log); loc != nil {
		log = log[:loc[0]]
	}
	sm := map[string]string{}
	var suite []string
	name := func(s string) string { return pyStrip(highlightTiming.ReplaceAllString(s, "")) }
	for _, line := range strings.Split(log, "\n") {
		s := pyStrip(line)
		switch {
		case strings.HasPrefix(s, "✓") || strings.HasPrefix(s, "✔"):
			check := "✔"
			if strings.HasPrefix(s, "✓") {
				check = "✓"
			}
			_, after, _ := strings.Cut(line, check)
			sm[strings.Join(append(slices.Clone(suite), name(after)), ".")] = StatusPassed
		case highlightFailure.MatchString(s):
			_, after, _ := strings.Cut(line, ")")
			sm[strings.Join(append(slices.Clone(suite), name(after)), ".")] = StatusFailed
		case strings.HasPrefix(line, "  "):
			// (The Python's next branch, four spaces but not two, can
			// never hold.)
			suite = []string{s}
		}
	}
	return sm, nil
}

const prismTestCmd = "./node_modules/.bin/mocha tests/run.js --reporter json"

// parsePrismJS is parse_log_prismjs: after each mocha command, the text
// from its first "{" to its last "}" is mocha's JSON report; its failures
// and then its passes are read by fullTitle.
func parsePrismJS(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, part := range strings.Split(log, prismTestCmd)[1:] {
		if _, after, ok := strings.Cut(part, "{"); ok {
			part = after
		}
		if i := strings.LastIndex(part, "}"); i >= 0 {
			part = part[:i]
		}
		var report any
		if err := json.Unmarshal([]byte("{"+part+"}"), &report); err != nil {
			return nil, fmt.Errorf("parse_log_prismjs: the mocha report is not JSON (the harness raises JSONDecodeError): %w", err)
		}
		obj := report.(map[string]any)
		for _, k := range []struct{ key, status string }{{"failures", StatusFailed}, {"passes", StatusPassed}} {
			tests, ok := obj[k.key]
			if !ok {
				return nil, fmt.Errorf("parse_log_prismjs: the mocha report has no %q (the harness raises KeyError)", k.key)
			}
			if err := mochaTitles(tests, k.key, k.status, sm); err != nil {
				return nil, err
			}
		}
	}
	return sm, nil
}

// mochaTitles is `for test in tests: sm[test["fullTitle"]] = status`
// with Python's rules for what iterates and what it yields.
func mochaTitles(tests any, key, status string, sm map[string]string) error {
	fail := func(what string) error {
		return fmt.Errorf("parse_log_prismjs: %q %s (the harness raises TypeError or KeyError)", key, what)
	}
	switch v := tests.(type) {
	case []any:
		for _, t := range v {
			o, ok := t.(map[string]any)
			if !ok {
				return fail("holds something other than an object")
			}
			title, ok := o["fullTitle"]
			if !ok {
				return fail("holds a test without fullTitle")
			}
			switch title := title.(type) {
			case string:
				sm[title] = status
			case []any, map[string]any:
				return fail("holds a fullTitle that is not hashable")
			}
			// A number, true/false or null is a key no test id (a string)
			// can equal; the map leaves it out.
		}
	case string, map[string]any:
		// Iterating a string or an object yields strings, which cannot be
		// indexed by "fullTitle": an error unless there is nothing to
		// iterate.
		if s, ok := v.(string); ok && s == "" {
			return nil
		}
		if o, ok := v.(map[string]any); ok && len(o) == 0 {
			return nil
		}
		return fail("is not a list of tests")
	default:
		return fail("is not iterable")
	}
	return nil
}

var (
	eslintFailure = pyre(`(\s{2}\d+\))((?s:.)*?)\s+(?:(.*)Error)`)
	pySpaces      = pyre(`\s+`)
)

// collapse is re.sub(r"\s+", " ", s).strip().
func collapse(s string) string { return pyStrip(pySpaces.ReplaceAllString(s, " ")) }

// [\s\S] is written (?s:.) in these patterns, as in openlayersFailures.

// parseESLint is parse_log_eslint (mocha --reporter min): the failures'
// titles only, whitespace collapsed; eslint is graded FAIL_ONLY.
func parseESLint(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, m := range eslintFailure.FindAllStringSubmatch(log, -1) {
		sm[collapse(m[2])] = StatusFailed
	}
	return sm, nil
}

// bpmnFailures are parse_log_bpmn_js's patterns; the third has two groups,
// and the test is its second.
var bpmnFailures = pyres(
	`2KPhantomJS\s[\d\.]+\s\(Linux\s[\d\.]+\)\s(.*)FAILED\n`,
	`2KPhantomJS\s[\d\.]+\s\(Linux\sx86\_64\)\s(.*)FAILED\n`,
	`Chrome\sHeadless\s(.*)\s\(Linux\sx86\_64\)\s(.*)FAILED\n`,
	`HeadlessChrome\s[\d\.]+\s\(Linux\s[\d\.]+\)\s(.*)FAILED\n`,
)

// parseBpmnJS is parse_log_bpmn_js: Karma's "... FAILED" lines.
func parseBpmnJS(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, p := range bpmnFailures {
		for _, m := range p.FindAllStringSubmatch(log, -1) {
			sm[m[len(m)-1]] = StatusFailed
		}
	}
	return sm, nil
}

// openlayersFailures are parse_log_openlayers's patterns (re.MULTILINE).
// [\d\.\_\S] is written \S (the class adds nothing to it), and [\s\S]
// (?s:.): pyre cannot put a negated escape in a class.
var openlayersFailures = []*regexp.Regexp{
	pyre(`(?m)Chrome\sHeadless\s[\d\.]+\s\(Linux\s\S+\)\s(.*)\sFAILED\n`),
	pyre(`(?m)Chrome\s[\d\.]+\s\(Linux\s\S+\)\s(.*)FAILED\n`),
	pyre(`(?m)^\s{2}\d+\)((?s:.)*?)Error:`),
	pyre(`(?m)^case\s(.*):\smismatch`),
}

// parseOpenLayers is parse_log_openlayers: failures only (FAIL_ONLY).
func parseOpenLayers(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, p := range openlayersFailures {
		for _, m := range p.FindAllStringSubmatch(log, -1) {
			sm[collapse(m[1])] = StatusFailed
		}
	}
	return sm, nil
}

var (
	grommetTiming = pyre(`\s\([\d\.]+\s?(?:ms|s)\)$`)
	grommetFail   = pyre(`(?m)^FAIL\s(.*)`)
	grommetPass   = pyre(`(?m)^PASS\s(.*)`)
)

// parseGrommet is parse_log_grommet: jest's per-file FAIL and PASS lines,
// timings removed; a file both failed and passed ends passed.
func parseGrommet(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, k := range []struct {
		re     *regexp.Regexp
		status string
	}{{grommetFail, StatusFailed}, {grommetPass, StatusPassed}} {
		for _, m := range k.re.FindAllStringSubmatch(log, -1) {
			sm[grommetTiming.ReplaceAllString(pyStrip(m[1]), "")] = k.status
		}
	}
	return sm, nil
}

var (
	nextAssertion = pyre(`AssertionError:\s+#((?s:.)*?)\n\n`)
	nextFail      = pyre(`^.*?✗\s*(.*)`)
	nextPass      = pyre(`^.*?✓\s*(.*)`)
)

// parseNextV1 is parse_log_next_v1 (karma-mocha-reporter, for every
// version of alibaba-fusion/next but 1.27).
func parseNextV1(log string) (map[string]string, error) {
	sm := map[string]string{}
	var suite []suiteLevel
	log = ansiEscape(log)
	log = nextAssertion.ReplaceAllString(log, "")
	for _, part := range strings.Split(log, " xvfb-run ")[1:] {
		chunks := strings.Split(part, "Starting browser Chrome")
		part = chunks[len(chunks)-1]
	lines:
		for _, line := range strings.Split(part, "\n") {
			if strings.HasPrefix(line, "TOTAL") {
				break
			}
			s := pyStrip(line)
			for _, skip := range []string{"ERROR", "LOG", "WARN", "Check", "in"} {
				if strings.HasPrefix(s, skip) {
					continue lines
				}
			}
			if m := pyMatch(nextFail, line); m != nil {
				sm[suiteName(suite, m[1], " - ")] = StatusFailed
			} else if m := pyMatch(nextPass, line); m != nil {
				sm[suiteName(suite, m[1], " - ")] = StatusPassed
			} else if indentOf(line) > 0 {
				suite = enterSuite(suite, line)
			}
		}
	}
	return sm, nil
}

var (
	nextV2Suites  = pyre(`Running\:(.*)\)\n{3}\s{2}(.*)\n`)
	nextV2Failure = pyre(`(?m)^\s{4}\d+\)\s(.*)`)
	nextV2Success = pyre(`(?m)^\s{4}✓\s(.*)\(`)
)

// parseNextV2 is parse_log_next_v2 (Cypress, alibaba-fusion/next 1.27):
// each "Running: spec)" header names a suite on the line after three
// newlines; its failures and passes follow, up to the next header.
func parseNextV2(log string) (map[string]string, error) {
	sm := map[string]string{}
	ms := nextV2Suites.FindAllStringSubmatchIndex(log, -1)
	for i, m := range ms {
		suite := log[m[4]:m[5]]
		end := len(log)
		if i+1 < len(ms) {
			end = ms[i+1][0]
		}
		body := log[m[1]:end]
		for _, f := range nextV2Failure.FindAllStringSubmatch(body, -1) {
			sm[suite+": "+pyStrip(f[1])] = StatusFailed
		}
		for _, s := range nextV2Success.FindAllStringSubmatch(body, -1) {
			sm[suite+": "+pyStrip(s[1])] = StatusPassed
		}
	}
	return sm, nil
}

// nextParser is parse_log_next's choice by version.
func nextParser(version string) LogParser {
	if version == "1.27" {
		return parseNextV2
	}
	return parseNextV1
}

// carbonPatterns are parse_log_carbon's, tried in order on each line.
// carbonPatterns are parse_log_carbon's, the same list as
// parse_log_react_pdf's.
var carbonPatterns = reactPDFPatterns

// parseCarbon is parse_log_carbon (also scratch-gui's, prettier's and
// lighthouse's jest parser): jest's per-file PASS and FAIL lines.
func parseCarbon(log string) (map[string]string, error) {
	return firstPatternPerLine(log, carbonPatterns), nil
}

var (
	lighthouseRuns    = pyre(`running\s\d+\stest\sfiles`)
	lighthousePassing = pyre(`\d+\spassing`)
	lighthouseTests   = []struct {
		re     *regexp.Regexp
		status string
	}{
		{pyre(`^✔\s(.*)\s\(\d+m+s\)`), StatusPassed},
		{pyre(`^✔\s(.*)`), StatusPassed},
		{pyre(`^\d+\)\s(.*)\s\(\d+m+s\)`), StatusFailed},
		{pyre(`^\d+\)\s(.*)`), StatusFailed},
	}
	lighthouseTitle = pyre(`(?m)"fullTitle"\:\s"(.*)",\n`)
)

// parseLighthouseMocha is parse_log_lighthouse_mocha (versions 9.5, 10.0
// and 10.2).
func parseLighthouseMocha(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, run := range splitRe(lighthouseRuns, log)[1:] {
		run = pyStrip(splitRe(lighthousePassing, run)[0])
		var suite []suiteLevel
		for _, line := range strings.Split(run, "\n") {
			found := false
			for _, p := range lighthouseTests {
				if m := pyMatch(p.re, pyStrip(line)); m != nil {
					sm[suiteName(suite, m[1], " - ")] = p.status
					found = true
					break
				}
			}
			if !found && indentOf(line) > 0 {
				suite = enterSuite(suite, line)
			}
		}
	}
	return sm, nil
}

// parseLighthouseJSON is parse_log_lighthouse for versions below 3:
// mocha's JSON reporter, read by pattern rather than parsed.
func parseLighthouseJSON(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, part := range strings.Split(log, "./node_modules/.bin/mocha --reporter json")[1:] {
		for _, k := range []struct{ open, close, status string }{
			{`"passes": [`, "]", StatusPassed},
			{`"failures": [`, "],", StatusFailed},
		} {
			s := part
			if i := strings.LastIndex(s, k.open); i >= 0 {
				s = s[i+len(k.open):]
			}
			if i := strings.LastIndex(s, k.close); i >= 0 {
				s = s[:i]
			}
			for _, m := range lighthouseTitle.FindAllStringSubmatch(s, -1) {
				sm[m[1]] = k.status
			}
		}
	}
	return sm, nil
}

// lighthouseParser is parse_log_lighthouse's choice by version, which
// compares float(version): a version float() cannot read makes the
// harness raise ValueError.
func lighthouseParser(version string) LogParser {
	switch version {
	case "9.5", "10.0", "10.2":
		return parseLighthouseMocha
	}
	v, err := pystr.Float(version)
	if err != nil {
		return func(string) (map[string]string, error) {
			return nil, fmt.Errorf("parse_log_lighthouse: version %q is not a number (the harness raises ValueError)", version)
		}
	}
	if v >= 3 {
		return parseCarbon
	}
	return parseLighthouseJSON
}

var (
	quartoTest      = pyre(`\[(smoke|unit)\]`)
	quartoTmpFiles  = pyres(`/tmp/(\w+)\.qmd`, `/tmp/(\w+)/`)
	quartoFinished  = pyre(`ERRORS|failures:`)
	quartoTestLabel = "..."
)

// parseQuartoCLI is parse_log_quarto_cli (deno test): "[smoke|unit] name
// ... ok|FAILED" lines, temporary file names numbered in order of first
// sight; a test line without a status is a failure; the first ERRORS or
// failures: ends the log.
func parseQuartoCLI(log string) (map[string]string, error) {
	sm := map[string]string{}
	tmp := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		if quartoFinished.MatchString(line) {
			break
		}
		if !quartoTest.MatchString(line) {
			continue
		}
		for _, p := range quartoTmpFiles {
			if m := p.FindString(line); m != "" {
				if _, ok := tmp[m]; !ok {
					tmp[m] = len(tmp)
				}
				line = p.ReplaceAllLiteralString(line, "/tmp/"+strconv.Itoa(tmp[m]))
			}
		}
		name, _, _ := strings.Cut(line, quartoTestLabel)
		name = pyStrip(name)
		reject := strings.HasPrefix(line, "test result:") ||
			(strings.Contains(line, "passed") && strings.Contains(line, "failed") && strings.Contains(line, "steps")) ||
			strings.Contains(line, "34mINFO")
		switch {
		case reject:
		case strings.Contains(line, "32mok"):
			sm[name] = StatusPassed
		case strings.Contains(line, "31mFAILED"):
			sm[name] = StatusFailed
		}
		if _, ok := sm[name]; !ok && !reject {
			sm[name] = StatusFailed
		}
	}
	return sm, nil
}

// splitRe is re.split(p, s) for a pattern without groups.
func splitRe(p *regexp.Regexp, s string) []string {
	var out []string
	last := 0
	for _, loc := range p.FindAllStringIndex(s, -1) {
		out = append(out, s[last:loc[0]])
		last = loc[1]
	}
	return append(out, s[last:])
}

package swebench

import (
	"fmt"
	"slices"
	"strings"
)

// Ruby and C log parsers: swebench 5.0.2's harness/log_parsers/ruby.py and c.py,
// ported line for line.

var minitestLine = pyre(`^(.+)\. .*=.*(\.|F|E).*$`)

// parseMinitest is parse_log_minitest: verbose minitest lines
// "Class#test_name = 0.01 s = ." ('.' passed, F or E failed).
func parseMinitest(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(minitestLine, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[2] {
		case ".":
			sm[m[1]] = StatusPassed
		case "F", "E":
			sm[m[1]] = StatusFailed
		}
	}
	return sm, nil
}

var cucumberLine = pyre(`^(.*) \.+(\.|F)`)

// parseCucumber is parse_log_cucumber (--format progress).
func parseCucumber(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(cucumberLine, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[2] {
		case ".":
			sm[m[1]] = StatusPassed
		case "F":
			sm[m[1]] = StatusFailed
		}
	}
	return sm, nil
}

// rubyUnitLine is `^\s*(?:test: )?(.+):\s+(\.|E\b|F\b|O\b)`. RE2 has no
// \b; after a letter, Python's \b holds when a non-word character or the
// end follows, which the second alternative spells out (the extra
// character it may consume is outside every group).
var rubyUnitLine = pyre(`^\s*(?:test: )?(.+):\s+(?:(\.)|([EFO])(?:$|\W))`)

// parseRubyUnit is parse_log_ruby_unit (test-unit verbose output:
// "test_name: ." / "E" / "F" / "O" for omitted).
func parseRubyUnit(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(rubyUnitLine, pyStrip(line))
		if m == nil {
			continue
		}
		outcome := m[2] + m[3]
		switch outcome {
		case ".":
			sm[m[1]] = StatusPassed
		case "E", "F":
			sm[m[1]] = StatusFailed
		case "O":
			sm[m[1]] = StatusSkipped
		}
	}
	return sm, nil
}

var rspecLine = pyre(`^(.+) - (passed|failed)`)

// parseRspecTransformedJSON is parse_log_rspec_transformed_json: RSpec's
// JSON report turned into "full description - passed|failed" lines by the
// eval script. (The Python's "pending" branch cannot be reached: the
// pattern only captures passed or failed.)
func parseRspecTransformedJSON(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(rspecLine, pyStrip(line))
		if m == nil {
			continue
		}
		if m[2] == "passed" {
			sm[m[1]] = StatusPassed
		} else {
			sm[m[1]] = StatusFailed
		}
	}
	return sm, nil
}

// jekyllParser is parse_log_jekyll's choice by the PR number (the second
// "-"-separated part of the instance id): minitest or cucumber; any other
// instance makes the harness raise.
func jekyllParser(instanceID string) (string, error) {
	parts := strings.Split(instanceID, "-")
	if len(parts) < 2 {
		return "", fmt.Errorf("parse_log_jekyll: instance id %q has no PR number (the harness raises IndexError)", instanceID)
	}
	switch {
	case slices.Contains([]string{"9141", "8047", "8167"}, parts[1]):
		return "parse_log_minitest", nil
	case slices.Contains([]string{"8761", "8771"}, parts[1]):
		return "parse_log_cucumber", nil
	}
	return "", fmt.Errorf("parse_log_jekyll: unknown instance id %s (the harness raises ValueError; it knows PRs 9141, 8047, 8167, 8761, 8771)", instanceID)
}

var (
	redisLine = pyre(`^\[(ok|err|skip|ignore)\]:\s(.+?)(?:\s\((\d+\s*m?s)\))?$`)
	redisIn   = pyre(`\s+in\s+\S+$`)
)

// parseRedis is parse_log_redis (Redis/Valkey's Tcl test runner):
// "[ok]: name (3 ms)"; a failed test's " in file" suffix is cut.
func parseRedis(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(redisLine, pyStrip(line))
		if m == nil {
			continue
		}
		name := m[2]
		switch m[1] {
		case "ok":
			sm[name] = StatusPassed
		case "err":
			sm[redisIn.ReplaceAllLiteralString(name, "")] = StatusFailed
		case "skip", "ignore":
			sm[name] = StatusSkipped
		}
	}
	return sm, nil
}

var jqLine = pyre(`^\s*(PASS|FAIL):\s(.+)$`)

// parseJq is parse_log_jq (automake's test driver: "PASS: tests/x.test").
func parseJq(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(jqLine, pyStrip(line))
		if m == nil {
			continue
		}
		if m[1] == "PASS" {
			sm[m[2]] = StatusPassed
		} else {
			sm[m[2]] = StatusFailed
		}
	}
	return sm, nil
}

// parseDoctest is parse_log_doctest (the doctest binary run with -s
// -r=xml): each SubCase of each TestCase is "TestCase > SubCase", passed
// when all its Expressions (nested ones included) succeeded. A
// <doctest> report that does not parse is an error, as the Python's
// uncaught ParseError is.
func parseDoctest(log string) (map[string]string, error) {
	sm := map[string]string{}
	const startTag, endTag = "<doctest", "</doctest>"
	start := strings.Index(log, startTag)
	if start == -1 {
		return sm, nil
	}
	// find() returns -1 when the end tag is missing: the slice then ends
	// at len(endTag)-1 and cannot parse.
	end := -1
	if i := strings.Index(log[start:], endTag); i >= 0 {
		end = start + i
	}
	end += len(endTag)
	root, err := etreeFromString(pySlice(log, start, end))
	if err != nil {
		return nil, fmt.Errorf("parse_log_doctest: %w", err)
	}
	for _, tc := range root.descendants("TestCase") {
		tcName := tc.get("name", "None")
		for _, sc := range tc.descendants("SubCase") {
			name := tcName + " > " + sc.get("name", "None")
			ok := true
			for _, e := range sc.descendants("Expression") {
				if e.get("success", "") != "true" {
					ok = false
				}
			}
			if ok {
				sm[name] = StatusPassed
			} else {
				sm[name] = StatusFailed
			}
		}
	}
	return sm, nil
}

var micropythonLine = pyre(`^(pass|FAIL|skip)\s+(.+)$`)

// parseMicropythonTest is parse_log_micropython_test (run-tests.py).
func parseMicropythonTest(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(micropythonLine, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[1] {
		case "pass":
			sm[m[2]] = StatusPassed
		case "FAIL":
			sm[m[2]] = StatusFailed
		case "skip":
			sm[m[2]] = StatusSkipped
		}
	}
	return sm, nil
}

var googletestLine = pyre(`^.*\[\s*(OK|FAILED)\s*\]\s(.*)\s\(.*\)$`)

// parseGoogletest is parse_log_googletest: "[       OK ] Suite.Test (0 ms)".
func parseGoogletest(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(googletestLine, pyStrip(line))
		if m == nil {
			continue
		}
		if m[1] == "OK" {
			sm[m[2]] = StatusPassed
		} else {
			sm[m[2]] = StatusFailed
		}
	}
	return sm, nil
}

package swebench

import (
	"strings"
)

// Java and PHP log parsers: swebench 5.0.2's harness/log_parsers/java.py
// and php.py, ported line for line.

var (
	mavenTestName = pyre(`^.*-Dtest=(\S+).*$`)
	mavenResult   = pyre(`^.*BUILD (SUCCESS|FAILURE)$`)
)

// parseMaven is parse_log_maven. Maven prints no per-test result, so the
// harness runs each test alone under set -x: the "-Dtest=NAME" command
// line names the test, the next "BUILD SUCCESS|FAILURE" is its result.
// Names queue up, so several commands traced before their results pair
// with them in order.
func parseMaven(log string) (map[string]string, error) {
	sm := map[string]string{}
	var pending []string
	for _, line := range strings.Split(log, "\n") {
		line = pyStrip(line)
		if m := pyMatch(mavenTestName, line); m != nil {
			pending = append(pending, m[1])
		}
		if m := pyMatch(mavenResult, line); m != nil && len(pending) > 0 {
			name := pending[0]
			pending = pending[1:]
			switch m[1] {
			case "SUCCESS":
				sm[name] = StatusPassed
			case "FAILURE":
				sm[name] = StatusFailed
			}
		}
	}
	return sm, nil
}

var antTest = pyre(`^\s*\[junit\]\s+\[(PASS|FAIL|ERR)\]\s+(.*)$`)

// parseAnt is parse_log_ant: "[junit] [PASS|FAIL|ERR] name"; ERR counts as
// FAILED.
func parseAnt(log string) (map[string]string, error) {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(antTest, pyStrip(line))
		if m == nil {
			continue
		}
		switch m[1] {
		case "PASS":
			sm[m[2]] = StatusPassed
		case "FAIL", "ERR":
			sm[m[2]] = StatusFailed
		}
	}
	return sm, nil
}

var (
	gradleFull       = pyre(`^([^>].+)\s+(PASSED|FAILED)$`)
	gradleTestName   = pyre(`^(\S+\s+>\s+\S+)$`)
	gradleStatusOnly = pyre(`^(PASSED|FAILED)$`)
)

// parseGradleCustom is parse_log_gradle_custom: "Class > method PASSED"
// lines, or the name and the status on separate lines when other output
// came between them.
func parseGradleCustom(log string) (map[string]string, error) {
	sm := map[string]string{}
	pending := ""
	havePending := false
	set := func(name, status string) {
		switch status {
		case "PASSED":
			sm[name] = StatusPassed
		case "FAILED":
			sm[name] = StatusFailed
		}
	}
	for _, line := range strings.Split(log, "\n") {
		s := pyStrip(line)
		if m := pyMatch(gradleFull, s); m != nil {
			set(m[1], m[2])
			havePending = false
			continue
		}
		if m := pyMatch(gradleTestName, s); m != nil {
			pending, havePending = m[1], true
			continue
		}
		// Python tests the pending name for truth: an empty one (which
		// the name pattern cannot produce) would not count.
		if havePending && pending != "" {
			if m := pyMatch(gradleStatusOnly, s); m != nil {
				set(pending, m[1])
				havePending = false
			}
		}
	}
	return sm, nil
}

var (
	phpunitSuite = pyre(`^(\w.+) \(.+\)$`)
	phpunitTest  = pyre(`^\s*([✔✘↩])\s*(.*)$`)
)

// parsePHPUnit is parse_log_phpunit (phpunit --testdox): a "Suite
// (Class\Name)" line opens a suite; "✔|✘|↩ name" lines are its tests,
// named "Suite > name" ("None > name" before any suite, as Python
// formats a missing suite).
func parsePHPUnit(log string) (map[string]string, error) {
	sm := map[string]string{}
	suite := "None"
	for _, line := range strings.Split(log, "\n") {
		if m := pyMatch(phpunitSuite, line); m != nil {
			suite = m[1]
			continue
		}
		m := pyMatch(phpunitTest, line)
		if m == nil {
			continue
		}
		name := suite + " > " + m[2]
		switch m[1] {
		case "✔":
			sm[name] = StatusPassed
		case "✘":
			sm[name] = StatusFailed
		case "↩":
			sm[name] = StatusSkipped
		}
	}
	return sm, nil
}

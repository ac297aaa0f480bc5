package swebench

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// This file holds SWE-bench's grading rules (swebench 5.0.2's
// swebench/harness/grading.py), and nothing else: markers, log validity,
// the outcome predicates and the FAIL_TO_PASS / PASS_TO_PASS resolution.
// The differential tests run grading.py itself on the same cases.

// Log markers.
const (
	StartTestOutput = ">>>>> Start Test Output"
	EndTestOutput   = ">>>>> End Test Output"
	ApplyPatchFail  = ">>>>> Patch Apply Failed"
	ResetFailed     = ">>>>> Reset Failed"
	TestsError      = ">>>>> Tests Errored"
	TestsTimeout    = ">>>>> Tests Timed Out"
)

// Eval types.
const (
	EvalPassAndFail = "pass_and_fail"
	EvalFailOnly    = "fail_only"
)

// failOnlyRepos are FAIL_ONLY_REPOS: graded FAIL_ONLY when an instance
// does not say.
var failOnlyRepos = map[string]bool{
	"chartjs/Chart.js": true, "processing/p5.js": true, "markedjs/marked": true,
	"bpmn-io/bpmn-js": true, "openlayers/openlayers": true, "eslint/eslint": true,
}

var suiteRan = regexp.MustCompile(`(?m)Executed [1-9]\d* of \d+|TOTAL: [1-9]\d* (SUCCESS|FAILED)|[1-9]\d* passing|Tests:\s+[1-9]\d*|Test Suites:\s+(\d+ \w+, )*[1-9]\d* total|^# tests [1-9]\d*|[1-9]\d* specs?, \d+ failures?|': ok$`)

var exitCodeMarker = regexp.MustCompile(`>>>>> Test Exit Code:\s*(-?\d+)`)

// LogsEval is get_logs_eval: the status map, or found=false with the reason
// when the log is invalid (a patch that did not apply, missing markers, no
// test result, or a non-zero test exit with nothing failed, which is how a
// log spoofing PASSED lines after a failure is caught). A parser that
// fails (raises, in the harness) makes the log invalid too: the harness
// errors the instance, which counts as not resolved.
func LogsEval(log string, parse LogParser) (sm map[string]string, found bool, reason string) {
	// The harness reads test_output.txt with open(), whose universal
	// newlines turn \r\n and a lone \r into \n before any rule or parser
	// sees the text.
	log = universalNewlines(log)
	for _, bad := range []string{ApplyPatchFail, ResetFailed, TestsError, TestsTimeout} {
		if strings.Contains(log, bad) {
			return map[string]string{}, false, "the log has " + bad
		}
	}
	if !strings.Contains(log, StartTestOutput) || !strings.Contains(log, EndTestOutput) {
		return map[string]string{}, false, "the test output markers are missing"
	}
	// content.split(START)[1].split(END)[0]
	section := strings.SplitN(log, StartTestOutput, 3)[1]
	section, _, _ = strings.Cut(section, EndTestOutput)
	sm, err := parse(section)
	if err == nil && len(sm) == 0 {
		sm, err = parse(log)
	}
	if err != nil {
		return map[string]string{}, false, "the log parser failed: " + err.Error()
	}
	if len(sm) == 0 && !suiteRan.MatchString(log) {
		return map[string]string{}, false, "no test result in the log"
	}
	if m := exitCodeMarker.FindStringSubmatch(log); m != nil {
		code, _ := strconv.Atoi(m[1])
		if code != 0 && len(sm) > 0 {
			failed := false
			for _, s := range sm {
				if s == StatusFailed || s == StatusError {
					failed = true
					break
				}
			}
			if !failed {
				return map[string]string{}, false, "the tests exited " + m[1] + " but no test failed (inconsistent log)"
			}
		}
	}
	return sm, true, ""
}

func universalNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// resolveCase is _resolve_case: the exact id, or, for an id truncated
// inside its parameters (more '[' than ']'), the keys it prefixes when they
// all agree on passing or not.
func resolveCase(c string, sm map[string]string) (string, bool) {
	if s, ok := sm[c]; ok {
		return s, true
	}
	if strings.Count(c, "[") <= strings.Count(c, "]") {
		return "", false
	}
	var keys []string
	for k := range sm {
		if strings.HasPrefix(k, c) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", false
	}
	sort.Strings(keys)
	first := passing(sm[keys[0]])
	for _, k := range keys[1:] {
		if passing(sm[k]) != first {
			return "", false
		}
	}
	return sm[keys[0]], true
}

func passing(s string) bool { return s == StatusPassed || s == StatusXFail }

func testPassed(c string, sm map[string]string) bool {
	s, ok := resolveCase(c, sm)
	return ok && passing(s)
}

func testMaintained(c string, sm map[string]string) bool {
	s, ok := resolveCase(c, sm)
	return ok && (passing(s) || s == StatusSkipped)
}

func testFailed(c string, sm map[string]string) bool {
	s, ok := resolveCase(c, sm)
	return !ok || s == StatusFailed || s == StatusError || s == StatusSkipped
}

// TestsReport is get_eval_tests_report's result.
type TestsReport struct {
	F2PSuccess, F2PFailure, P2PSuccess, P2PFailure []string
}

// EvalTestsReport is get_eval_tests_report.
func EvalTestsReport(sm map[string]string, f2p, p2p []string, evalType string) TestsReport {
	var r TestsReport
	if evalType == EvalFailOnly {
		// check_fail_only: exact membership, no truncated-id fallback; a
		// test absent from the map is a success.
		check := func(c string, succ, fail *[]string) {
			if s, ok := sm[c]; ok && s == StatusFailed {
				*fail = append(*fail, c)
			} else {
				*succ = append(*succ, c)
			}
		}
		for _, c := range f2p {
			check(c, &r.F2PSuccess, &r.F2PFailure)
		}
		for _, c := range p2p {
			check(c, &r.P2PSuccess, &r.P2PFailure)
		}
		return r
	}
	for _, c := range f2p {
		switch {
		case testPassed(c, sm):
			r.F2PSuccess = append(r.F2PSuccess, c)
		case testFailed(c, sm):
			r.F2PFailure = append(r.F2PFailure, c)
		}
	}
	for _, c := range p2p {
		switch {
		case testMaintained(c, sm):
			r.P2PSuccess = append(r.P2PSuccess, c)
		case testFailed(c, sm):
			r.P2PFailure = append(r.P2PFailure, c)
		}
	}
	return r
}

// Resolution statuses.
const (
	ResolvedFull    = "RESOLVED_FULL"
	ResolvedPartial = "RESOLVED_PARTIAL"
	ResolvedNo      = "RESOLVED_NO"
)

func ratio(succ, fail int) float64 {
	if succ+fail == 0 {
		return 1
	}
	return float64(succ) / float64(succ+fail)
}

// Resolution is get_resolution_status.
func (r TestsReport) Resolution() string {
	f2p := ratio(len(r.F2PSuccess), len(r.F2PFailure))
	p2p := ratio(len(r.P2PSuccess), len(r.P2PFailure))
	switch {
	case f2p == 1 && p2p == 1:
		return ResolvedFull
	case f2p > 0 && f2p < 1 && p2p == 1:
		return ResolvedPartial
	}
	return ResolvedNo
}

// Grade is the part of an instance the grader needs.
type Grade struct {
	InstanceID string   `json:"instance_id"`
	FailToPass []string `json:"FAIL_TO_PASS"`
	PassToPass []string `json:"PASS_TO_PASS"`
	LogParser  string   `json:"log_parser"`
	EvalType   string   `json:"eval_type"`
	// Version is the instance's version, which parse_log_next and
	// parse_log_lighthouse choose by.
	Version string `json:"version,omitempty"`
}

// Report is get_eval_report for one instance.
type Report struct {
	PatchSuccessfullyApplied bool        `json:"patch_successfully_applied"`
	Resolved                 bool        `json:"resolved"`
	Status                   string      `json:"status"`
	Reason                   string      `json:"reason,omitempty"`
	Tests                    TestsReport `json:"tests_status"`
}

// EvalReport grades a test log.
func EvalReport(g Grade, log string) Report {
	parse, err := ParserForInstance(g.LogParser, g.InstanceID, g.Version)
	if err != nil {
		return Report{Status: ResolvedNo, Reason: err.Error()}
	}
	sm, found, reason := LogsEval(log, parse)
	if !found {
		return Report{Status: ResolvedNo, Reason: reason}
	}
	tr := EvalTestsReport(sm, g.FailToPass, g.PassToPass, g.EvalType)
	st := tr.Resolution()
	return Report{PatchSuccessfullyApplied: true, Resolved: st == ResolvedFull, Status: st, Tests: tr}
}

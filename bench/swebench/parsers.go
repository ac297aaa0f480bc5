package swebench

import (
	"regexp"
	"strings"
)

// Test statuses (SWE-bench's TestStatus).
const (
	StatusFailed  = "FAILED"
	StatusPassed  = "PASSED"
	StatusSkipped = "SKIPPED"
	StatusError   = "ERROR"
	StatusXFail   = "XFAIL"
)

var allStatuses = []string{StatusFailed, StatusPassed, StatusSkipped, StatusError, StatusXFail}

// LogParser turns a test log into a status map, as a function of SWE-bench's
// PARSER_REGISTRY does.
type LogParser func(log string) map[string]string

// Parsers are SWE-bench's log parsers by registry name.
var Parsers = map[string]LogParser{
	"parse_log_pytest":         parsePytest,
	"parse_log_pytest_options": parsePytestOptions,
	"parse_log_pytest_v2":      parsePytestV2,
	"parse_log_django":         parseDjango,
	"parse_log_seaborn":        parseSeaborn,
	"parse_log_sympy":          parseSympy,
	"parse_log_matplotlib":     parseMatplotlib,
	"parse_log_gotest":         parseGoTest,
	"parse_log_cargo":          parseCargo,
	"parse_log_jest":           parseJest,
}

// repoParsers is MAP_REPO_TO_PARSER for classic instances.
var repoParsers = map[string]string{
	"astropy/astropy":              "parse_log_pytest_v2",
	"django/django":                "parse_log_django",
	"marshmallow-code/marshmallow": "parse_log_pytest",
	"matplotlib/matplotlib":        "parse_log_matplotlib",
	"mwaskom/seaborn":              "parse_log_seaborn",
	"pallets/flask":                "parse_log_pytest",
	"psf/requests":                 "parse_log_pytest_options",
	"pvlib/pvlib-python":           "parse_log_pytest",
	"pydata/xarray":                "parse_log_pytest",
	"pydicom/pydicom":              "parse_log_pytest_options",
	"pylint-dev/astroid":           "parse_log_pytest",
	"pylint-dev/pylint":            "parse_log_pytest_options",
	"pytest-dev/pytest":            "parse_log_pytest",
	"pyvista/pyvista":              "parse_log_pytest",
	"scikit-learn/scikit-learn":    "parse_log_pytest_v2",
	"sqlfluff/sqlfluff":            "parse_log_pytest",
	"sphinx-doc/sphinx":            "parse_log_pytest_v2",
	"sympy/sympy":                  "parse_log_sympy",
	"caddyserver/caddy":            "parse_log_gotest",
	"hashicorp/terraform":          "parse_log_gotest",
	"prometheus/prometheus":        "parse_log_gotest",
	"gohugoio/hugo":                "parse_log_gotest",
	"gin-gonic/gin":                "parse_log_gotest",
	"BurntSushi/ripgrep":           "parse_log_cargo",
	"sharkdp/bat":                  "parse_log_cargo",
	"astral-sh/ruff":               "parse_log_cargo",
	"tokio-rs/tokio":               "parse_log_cargo",
	"uutils/coreutils":             "parse_log_cargo",
	"nushell/nushell":              "parse_log_cargo",
	"tokio-rs/axum":                "parse_log_cargo",
}

func startsWithStatus(line string) bool {
	for _, s := range allStatuses {
		if strings.HasPrefix(line, s) {
			return true
		}
	}
	return false
}

func endsWithStatus(line string) bool {
	for _, s := range allStatuses {
		if strings.HasSuffix(line, s) {
			return true
		}
	}
	return false
}

var skipCount = regexp.MustCompile(`^\[\d+\]$`)

// parsePytest is parse_log_pytest: "STATUS id" lines; FAILED lines have
// " - " replaced by " "; "SKIPPED [N] path:line" summary lines are not ids.
func parsePytest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if !startsWithStatus(line) {
			continue
		}
		if strings.HasPrefix(line, StatusFailed) {
			line = strings.ReplaceAll(line, " - ", " ")
		}
		tc := strings.Fields(line)
		if len(tc) <= 1 || skipCount.MatchString(tc[1]) {
			continue
		}
		sm[tc[1]] = tc[0]
	}
	return sm
}

var optionPattern = regexp.MustCompile(`(.*?)\[(.*)\]`)

// parsePytestOptions is parse_log_pytest_options: as parsePytest, with an
// option that is an absolute path shortened to its base name.
func parsePytestOptions(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if !startsWithStatus(line) {
			continue
		}
		if strings.HasPrefix(line, StatusFailed) {
			line = strings.ReplaceAll(line, " - ", " ")
		}
		tc := strings.Fields(line)
		if len(tc) <= 1 || skipCount.MatchString(tc[1]) {
			continue
		}
		name := tc[1]
		if m := optionPattern.FindStringSubmatch(tc[1]); m != nil {
			main, opt := m[1], m[2]
			if strings.HasPrefix(opt, "/") && !strings.HasPrefix(opt, "//") && !strings.Contains(opt, "*") {
				parts := strings.Split(opt, "/")
				opt = "/" + parts[len(parts)-1]
			}
			name = main + "[" + opt + "]"
		}
		sm[name] = tc[0]
	}
	return sm
}

var colorCode = regexp.MustCompile(`\[(\d+)m`)

// parsePytestV2 is parse_log_pytest_v2: colour codes and control
// characters removed; status-first lines (FAILED cut at the first " - ")
// key on the rest of the line; lines ending with a status key on what
// precedes it.
func parsePytestV2(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		line = colorCode.ReplaceAllString(line, "")
		line = strings.Map(func(r rune) rune {
			if r >= 1 && r < 32 {
				return -1
			}
			return r
		}, line)
		switch {
		case startsWithStatus(line):
			if strings.HasPrefix(line, StatusFailed) {
				line, _, _ = strings.Cut(line, " - ")
			}
			tc := strings.Fields(line)
			if len(tc) >= 2 {
				sm[strings.Join(tc[1:], " ")] = tc[0]
			}
		case endsWithStatus(line):
			tc := strings.Fields(line)
			if len(tc) >= 2 {
				sm[strings.Join(tc[:len(tc)-1], " ")] = tc[len(tc)-1]
			}
		}
	}
	return sm
}

var djangoPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sTesting against Django installed in ((?s:.*?)) silenced\)\.\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sInternal Server Error: \/(.*)\/\nok$`),
	regexp.MustCompile(`(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$`),
}

// parseDjango is parse_log_django.
func parseDjango(log string) map[string]string {
	sm := map[string]string{}
	prev := ""
	havePrev := false
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "--version is equivalent to version") {
			sm["--version is equivalent to version"] = StatusPassed
		}
		if strings.Contains(line, " ... ") {
			prev, _, _ = strings.Cut(line, " ... ")
			havePrev = true
		}
		for _, suffix := range []string{" ... ok", " ... OK", " ...  OK"} {
			if strings.HasSuffix(line, suffix) {
				if strings.HasPrefix(line, "Applying sites.0002_alter_domain_unique...test_no_migrations") {
					_, rest, _ := strings.Cut(line, "...")
					line = strings.TrimSpace(rest)
				}
				i := strings.LastIndex(line, suffix)
				sm[line[:i]] = StatusPassed
				break
			}
		}
		if strings.Contains(line, " ... skipped") {
			t, _, _ := strings.Cut(line, " ... skipped")
			sm[t] = StatusSkipped
		}
		if strings.HasSuffix(line, " ... FAIL") {
			t, _, _ := strings.Cut(line, " ... FAIL")
			sm[t] = StatusFailed
		}
		if strings.HasPrefix(line, "FAIL:") {
			if f := strings.Fields(line); len(f) > 1 {
				sm[f[1]] = StatusFailed
			}
		}
		if strings.HasSuffix(line, " ... ERROR") {
			t, _, _ := strings.Cut(line, " ... ERROR")
			sm[t] = StatusError
		}
		if strings.HasPrefix(line, "ERROR:") {
			if f := strings.Fields(line); len(f) > 1 {
				sm[f[1]] = StatusError
			}
		}
		if strings.HasPrefix(line, "ok") && havePrev {
			sm[prev] = StatusPassed
		}
	}
	for _, p := range djangoPatterns {
		for _, m := range p.FindAllStringSubmatch(log, -1) {
			sm[m[1]] = StatusPassed
		}
	}
	return sm
}

// parseSeaborn is parse_log_seaborn.
func parseSeaborn(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(line, StatusFailed):
			if f := strings.Fields(line); len(f) > 1 {
				sm[f[1]] = StatusFailed
			}
		case strings.Contains(line, " "+StatusPassed+" "):
			if f := strings.Fields(line); len(f) > 1 && f[1] == StatusPassed {
				sm[f[0]] = StatusPassed
			}
		case strings.HasPrefix(line, StatusPassed):
			if f := strings.Fields(line); len(f) > 1 {
				sm[f[1]] = StatusPassed
			}
		}
	}
	return sm
}

var sympyFailure = regexp.MustCompile(`(_*) (.*)\.py:(.*) (_*)`)

// parseSympy is parse_log_sympy.
func parseSympy(log string) map[string]string {
	sm := map[string]string{}
	for _, m := range sympyFailure.FindAllStringSubmatch(log, -1) {
		sm[m[2]+".py:"+m[3]] = StatusFailed
	}
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "test_") {
			continue
		}
		name := strings.Fields(line)[0]
		if strings.HasSuffix(line, " E") {
			sm[name] = StatusError
		}
		if strings.HasSuffix(line, " F") {
			sm[name] = StatusFailed
		}
		if strings.HasSuffix(line, " ok") {
			sm[name] = StatusPassed
		}
	}
	return sm
}

// parseMatplotlib is parse_log_matplotlib: pytest with mouse buttons
// written as numbers.
func parseMatplotlib(log string) map[string]string {
	log = strings.NewReplacer("MouseButton.LEFT", "1", "MouseButton.RIGHT", "3").Replace(log)
	return parsePytest(log)
}

var goTest = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$`)

// parseGoTest is parse_log_gotest.
func parseGoTest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := goTest.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		sm[m[2]] = map[string]string{"PASS": StatusPassed, "FAIL": StatusFailed, "SKIP": StatusSkipped}[m[1]]
	}
	return sm
}

var cargoTest = regexp.MustCompile(`^test\s+(\S+)\s+\.\.\.\s+(\w+)$`)

// parseCargo is parse_log_cargo: "test name ... ok|FAILED".
func parseCargo(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := cargoTest.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		switch m[2] {
		case "ok":
			sm[m[1]] = StatusPassed
		case "FAILED":
			sm[m[1]] = StatusFailed
		}
	}
	return sm
}

var jestTest = regexp.MustCompile(`^\s*(✓|✕|○)\s(.+?)(?:\s\((\d+\s*m?s)\))?$`)

// parseJest is parse_log_jest.
func parseJest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := jestTest.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		sm[m[2]] = map[string]string{"✓": StatusPassed, "✕": StatusFailed, "○": StatusSkipped}[m[1]]
	}
	return sm
}

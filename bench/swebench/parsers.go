package swebench

import (
	"fmt"
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
// PARSER_REGISTRY does. An error is a parser that raises in the harness
// (a report that does not parse, a line its pattern should have matched):
// the harness then fails the instance instead of grading it.
type LogParser func(log string) (map[string]string, error)

// total adapts a parser that cannot fail.
func total(f func(string) map[string]string) LogParser {
	return func(log string) (map[string]string, error) { return f(log), nil }
}

// Parsers are SWE-bench's log parsers by registry name: swebench 5.0.2's
// PARSER_REGISTRY (swebench/harness/log_parsers/__init__.py), the Python
// per-repo aliases (parse_log_astropy, …) included. The differential
// tests check this against the package itself. parse_log_jekyll and parse_log_immutable_js choose a
// parser by instance: see ParserFor.
var Parsers = map[string]LogParser{
	// python.py
	"parse_log_pytest":         total(parsePytest),
	"parse_log_pytest_options": total(parsePytestOptions),
	"parse_log_pytest_v2":      total(parsePytestV2),
	"parse_log_django":         parseDjango,
	"parse_log_seaborn":        total(parseSeaborn),
	"parse_log_sympy":          total(parseSympy),
	"parse_log_matplotlib":     total(parseMatplotlib),
	"parse_log_astroid":        total(parsePytest),
	"parse_log_flask":          total(parsePytest),
	"parse_log_marshmallow":    total(parsePytest),
	"parse_log_pvlib":          total(parsePytest),
	"parse_log_pyvista":        total(parsePytest),
	"parse_log_sqlfluff":       total(parsePytest),
	"parse_log_xarray":         total(parsePytest),
	"parse_log_pydicom":        total(parsePytestOptions),
	"parse_log_requests":       total(parsePytestOptions),
	"parse_log_pylint":         total(parsePytestOptions),
	"parse_log_astropy":        total(parsePytestV2),
	"parse_log_scikit":         total(parsePytestV2),
	"parse_log_sphinx":         total(parsePytestV2),
	// go.py, rust.py
	"parse_log_gotest": total(parseGoTest),
	"parse_log_cargo":  total(parseCargo),
	// javascript.py
	"parse_log_calypso":     parseCalypso,
	"parse_log_chart_js":    parseChartJS,
	"parse_log_marked":      parseMarked,
	"parse_log_p5js":        parseP5JS,
	"parse_log_react_pdf":   parseReactPDF,
	"parse_log_jest":        total(parseJest),
	"parse_log_jest_json":   parseJestJSON,
	"parse_log_vitest":      parseVitest,
	"parse_log_karma":       parseKarma,
	"parse_log_tap":         parseTap,
	"parse_log_highlightjs": parseHighlightJS,
	"parse_log_prismjs":     parsePrismJS,
	"parse_log_eslint":      parseESLint,
	"parse_log_bpmn_js":     parseBpmnJS,
	"parse_log_openlayers":  parseOpenLayers,
	"parse_log_grommet":     parseGrommet,
	"parse_log_carbon":      parseCarbon,
	"parse_log_quarto_cli":  parseQuartoCLI,
	// java.py, php.py
	"parse_log_maven":         parseMaven,
	"parse_log_ant":           parseAnt,
	"parse_log_gradle_custom": parseGradleCustom,
	"parse_log_phpunit":       parsePHPUnit,
	// ruby.py
	"parse_log_minitest":               parseMinitest,
	"parse_log_cucumber":               parseCucumber,
	"parse_log_ruby_unit":              parseRubyUnit,
	"parse_log_rspec_transformed_json": parseRspecTransformedJSON,
	// c.py
	"parse_log_redis":            parseRedis,
	"parse_log_jq":               parseJq,
	"parse_log_doctest":          parseDoctest,
	"parse_log_micropython_test": parseMicropythonTest,
	"parse_log_googletest":       parseGoogletest,
}

// instanceParsers are the registry entries that pick another parser by
// instance id, raising for an instance they do not know.
var instanceParsers = map[string]func(instanceID string) (string, error){
	"parse_log_jekyll":       jekyllParser,
	"parse_log_immutable_js": immutableJSParser,
}

// versionParsers are the registry entries that pick a parser by the
// instance's version (test_spec.version).
var versionParsers = map[string]func(version string) LogParser{
	"parse_log_next":       nextParser,
	"parse_log_lighthouse": lighthouseParser,
}

// ParserFor is ParserForInstance for an instance whose version is not
// known: the parsers that choose by version see "".
func ParserFor(name, instanceID string) (LogParser, error) {
	return ParserForInstance(name, instanceID, "")
}

// ParserForInstance is the log parser an instance is graded with: the
// registry entry named, resolved for the instance when the entry chooses
// by instance id or version. An unknown name, or an instance the entry
// does not know, is an error (the harness would raise while grading).
func ParserForInstance(name, instanceID, version string) (LogParser, error) {
	if pick, ok := versionParsers[name]; ok {
		return pick(version), nil
	}
	if pick, ok := instanceParsers[name]; ok {
		n, err := pick(instanceID)
		if err != nil {
			return nil, err
		}
		name = n
	}
	p, ok := Parsers[name]
	if !ok {
		return nil, fmt.Errorf("log parser %q is not in swebench 5.0.2's PARSER_REGISTRY", name)
	}
	return p, nil
}

// repoParsers is swebench 5.0.2's MAP_REPO_TO_PARSER_{PY,GO,RUST,JS,JAVA,
// PHP,RUBY,C}, by registry name (the maps name each repo's function; the
// aliases above resolve to the same ones). Three repos the package maps to
// a function outside its registry (cypress, emotion, plotly.js) are left
// out: the harness cannot grade them by name either.
var repoParsers = map[string]string{
	// python.py
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
	// go.py
	"caddyserver/caddy":     "parse_log_gotest",
	"hashicorp/terraform":   "parse_log_gotest",
	"prometheus/prometheus": "parse_log_gotest",
	"gohugoio/hugo":         "parse_log_gotest",
	"gin-gonic/gin":         "parse_log_gotest",
	// rust.py
	// upstream writes ripgrep's key in lower case; datasets spell the
	// repo BurntSushi/ripgrep, so both are here.
	"burntsushi/ripgrep": "parse_log_cargo",
	"BurntSushi/ripgrep": "parse_log_cargo",
	"sharkdp/bat":        "parse_log_cargo",
	"astral-sh/ruff":     "parse_log_cargo",
	"tokio-rs/tokio":     "parse_log_cargo",
	"uutils/coreutils":   "parse_log_cargo",
	"nushell/nushell":    "parse_log_cargo",
	"tokio-rs/axum":      "parse_log_cargo",
	// javascript.py
	"Automattic/wp-calypso":       "parse_log_calypso",
	"chartjs/Chart.js":            "parse_log_chart_js",
	"markedjs/marked":             "parse_log_marked",
	"processing/p5.js":            "parse_log_p5js",
	"diegomura/react-pdf":         "parse_log_react_pdf",
	"babel/babel":                 "parse_log_jest",
	"vuejs/core":                  "parse_log_vitest",
	"facebook/docusaurus":         "parse_log_jest",
	"immutable-js/immutable-js":   "parse_log_immutable_js",
	"mrdoob/three.js":             "parse_log_tap",
	"preactjs/preact":             "parse_log_karma",
	"axios/axios":                 "parse_log_tap",
	"alibaba-fusion/next":         "parse_log_next",
	"bpmn-io/bpmn-js":             "parse_log_bpmn_js",
	"carbon-design-system/carbon": "parse_log_carbon",
	// not in the registry: "cypress-io/cypress": "parse_log_cypress",
	// not in the registry: "emotion-js/emotion": "parse_log_emotion",
	"eslint/eslint":            "parse_log_eslint",
	"GoogleChrome/lighthouse":  "parse_log_lighthouse",
	"grommet/grommet":          "parse_log_grommet",
	"highlightjs/highlight.js": "parse_log_highlightjs",
	"openlayers/openlayers":    "parse_log_openlayers",
	// not in the registry: "plotly/plotly.js": "parse_plotly_js",
	"prettier/prettier":             "parse_log_carbon",
	"PrismJS/prism":                 "parse_log_prismjs",
	"quarto-dev/quarto-cli":         "parse_log_quarto_cli",
	"scratchfoundation/scratch-gui": "parse_log_carbon",
	// java.py
	"google/gson":           "parse_log_maven",
	"apache/druid":          "parse_log_maven",
	"javaparser/javaparser": "parse_log_maven",
	"projectlombok/lombok":  "parse_log_ant",
	"apache/lucene":         "parse_log_gradle_custom",
	"reactivex/rxjava":      "parse_log_gradle_custom",
	// php.py
	"phpoffice/phpspreadsheet":  "parse_log_phpunit",
	"laravel/framework":         "parse_log_phpunit",
	"php-cs-fixer/php-cs-fixer": "parse_log_phpunit",
	"briannesbitt/carbon":       "parse_log_phpunit",
	// ruby.py
	"jekyll/jekyll":     "parse_log_jekyll",
	"fluent/fluentd":    "parse_log_ruby_unit",
	"fastlane/fastlane": "parse_log_rspec_transformed_json",
	"jordansissel/fpm":  "parse_log_rspec_transformed_json",
	"faker-ruby/faker":  "parse_log_ruby_unit",
	"rubocop/rubocop":   "parse_log_rspec_transformed_json",
	// c.py
	"redis/redis":             "parse_log_redis",
	"jqlang/jq":               "parse_log_jq",
	"nlohmann/json":           "parse_log_doctest",
	"micropython/micropython": "parse_log_micropython_test",
	"valkey-io/valkey":        "parse_log_redis",
	"fmtlib/fmt":              "parse_log_googletest",
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

var skipCount = pyre(`^\[\d+\]$`)

// isSkipSummary is _is_skip_summary: pytest's "SKIPPED [N] path:line:
// reason" summary, whose [N] is not a test. Upstream scopes it to SKIPPED
// on purpose: a wrapped progress line's "PASSED [100%]" is kept, because
// two instances' PASS_TO_PASS lists literally expect "[100%]".
func isSkipSummary(status, name string) bool {
	return status == StatusSkipped && skipCount.MatchString(name)
}

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
		tc := pySplit(line)
		if len(tc) <= 1 || isSkipSummary(tc[0], tc[1]) {
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
		tc := pySplit(line)
		if len(tc) <= 1 || isSkipSummary(tc[0], tc[1]) {
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
// key on the rest of the line, but for the "SKIPPED [N] …" summary;
// lines ending with a status key on what precedes it.
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
			tc := pySplit(line)
			if len(tc) >= 2 && !isSkipSummary(tc[0], tc[1]) {
				sm[strings.Join(tc[1:], " ")] = tc[0]
			}
		case endsWithStatus(line):
			tc := pySplit(line)
			if len(tc) >= 2 {
				sm[strings.Join(tc[:len(tc)-1], " ")] = tc[len(tc)-1]
			}
		}
	}
	return sm
}

var djangoPatterns = []*regexp.Regexp{
	pyre(`(?m)^(.*?)\s\.\.\.\sTesting against Django installed in ((?s:.*?)) silenced\)\.\nok$`),
	pyre(`(?m)^(.*?)\s\.\.\.\sInternal Server Error: \/(.*)\/\nok$`),
	pyre(`(?m)^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$`),
}

// parseDjango is parse_log_django.
func parseDjango(log string) (map[string]string, error) {
	sm := map[string]string{}
	prev := ""
	havePrev := false
	for _, line := range strings.Split(log, "\n") {
		line = pyStrip(line)
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
					line = pyStrip(rest)
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
			f := pySplit(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("parse_log_django: line %q has no test name after FAIL: (the harness raises IndexError)", line)
			}
			sm[f[1]] = StatusFailed
		}
		if strings.HasSuffix(line, " ... ERROR") {
			t, _, _ := strings.Cut(line, " ... ERROR")
			sm[t] = StatusError
		}
		if strings.HasPrefix(line, "ERROR:") {
			f := pySplit(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("parse_log_django: line %q has no test name after ERROR: (the harness raises IndexError)", line)
			}
			sm[f[1]] = StatusError
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
	return sm, nil
}

// parseSeaborn is parse_log_seaborn. A line of fewer than two words
// (a bare "PASSED" or "FAILED" a wrapped progress line leaves) is skipped,
// as swebench 5.0.2 does; older versions raised IndexError on it.
func parseSeaborn(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		f := pySplit(line)
		if len(f) < 2 {
			continue
		}
		switch {
		case strings.HasPrefix(line, StatusFailed):
			sm[f[1]] = StatusFailed
		case strings.Contains(line, " "+StatusPassed+" "):
			if f[1] == StatusPassed {
				sm[f[0]] = StatusPassed
			}
		case strings.HasPrefix(line, StatusPassed):
			sm[f[1]] = StatusPassed
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
		line = pyStrip(line)
		if !strings.HasPrefix(line, "test_") {
			continue
		}
		name := pySplit(line)[0]
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
		m := goTest.FindStringSubmatch(pyStrip(line))
		if m == nil {
			continue
		}
		sm[m[2]] = map[string]string{"PASS": StatusPassed, "FAIL": StatusFailed, "SKIP": StatusSkipped}[m[1]]
	}
	return sm
}

var cargoTest = pyre(`^test\s+(\S+)\s+\.\.\.\s+(\w+)$`)

// parseCargo is parse_log_cargo: "test name ... ok|FAILED".
func parseCargo(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := cargoTest.FindStringSubmatch(pyStrip(line))
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

var jestTest = pyre(`^\s*(✓|✕|○)\s(.+?)(?:\s\((\d+\s*m?s)\))?$`)

// parseJest is parse_log_jest (jest --verbose): the stripped line
// matched, the name stripped again.
func parseJest(log string) map[string]string {
	sm := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := pyMatch(jestTest, pyStrip(line))
		if m == nil {
			continue
		}
		sm[pyStrip(m[2])] = map[string]string{"✓": StatusPassed, "✕": StatusFailed, "○": StatusSkipped}[m[1]]
	}
	return sm
}

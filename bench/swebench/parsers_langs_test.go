package swebench

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/internal/testenv"
)

// parserCase is a log in the format a test runner prints and the status
// map SWE-bench's parser gives for it. No real SWE-bench log of these
// languages is among the shared samples, so each log is written in the
// exact format its runner prints (the comment says which runner and
// options), with the edge cases the Python code has; the expected maps
// were checked against the Python parsers themselves.
type parserCase struct {
	name   string // subtest name
	parser string // registry name
	log    string
	want   map[string]string
}

var langCases = []parserCase{
	{
		// `set -x` trace of one `mvn test -Dtest=...` per test, then
		// Maven's batch-mode result line; the second and third commands
		// are traced before the first result (the race the parser handles).
		name: "maven", parser: "parse_log_maven",
		log: `+ mvn test -B -Dtest=com.google.gson.JsonParserTest#testParseString -DfailIfNoTests=false
[INFO] Scanning for projects...
[INFO] -------------------------------------------------------
[INFO]  T E S T S
[INFO] -------------------------------------------------------
[INFO] Running com.google.gson.JsonParserTest
[INFO] Tests run: 1, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0.05 s - in com.google.gson.JsonParserTest
[INFO] ------------------------------------------------------------------------
[INFO] BUILD SUCCESS
[INFO] ------------------------------------------------------------------------
+ mvn test -B -Dtest=com.google.gson.JsonParserTest#testParseEmpty -DfailIfNoTests=false
+ mvn test -B -Dtest=com.google.gson.GsonTest#testOverrides -DfailIfNoTests=false
[ERROR] Tests run: 1, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.04 s <<< FAILURE! - in com.google.gson.JsonParserTest
[INFO] BUILD FAILURE
[INFO] BUILD SUCCESS
[INFO] BUILD SUCCESS
`,
		want: map[string]string{
			"com.google.gson.JsonParserTest#testParseString": "PASSED",
			"com.google.gson.JsonParserTest#testParseEmpty":  "FAILED",
			"com.google.gson.GsonTest#testOverrides":         "PASSED",
		},
	},
	{
		// Lombok's ant test target, one "[junit] [STATUS] name" line a test.
		name: "ant", parser: "parse_log_ant",
		log: `    [junit] Running lombok.TestJavac
    [junit] [PASS] lombok.TestJavac.testBuilderSimple
    [junit] [FAIL] lombok.TestJavac.testValPlain
    [junit] [ERR] lombok.TestJavac.testDelegate
    [junit] [SKIP] lombok.TestJavac.testOther
`,
		want: map[string]string{
			"lombok.TestJavac.testBuilderSimple": "PASSED",
			"lombok.TestJavac.testValPlain":      "FAILED",
			"lombok.TestJavac.testDelegate":      "FAILED",
		},
	},
	{
		// gradle test with the harness's testLogging init script
		// (events "passed", "failed"): "Class > method STATUS"; once a
		// warning lands between a name and its status.
		name: "gradle_custom", parser: "parse_log_gradle_custom",
		log: `> Task :lucene:core:test

org.apache.lucene.util.TestVersion > testParse PASSED

org.apache.lucene.util.TestVersion > testDeprecations FAILED
    java.lang.AssertionError at TestVersion.java:88

org.apache.lucene.search.TestBoolean2 > testQueries01
WARNING: A terminally deprecated method in java.lang.System has been called
PASSED
> Task :lucene:core:test FAILED
`,
		want: map[string]string{
			"org.apache.lucene.util.TestVersion > testParse":        "PASSED",
			"org.apache.lucene.util.TestVersion > testDeprecations": "FAILED",
			"org.apache.lucene.search.TestBoolean2 > testQueries01": "PASSED",
		},
	},
	{
		// phpunit --testdox (PHPUnit 9/10): suite headers "Title
		// (Class\Name)", tests "✔|✘|↩ name"; the failure detail's box
		// lines are not tests; "OK (…)" at the end looks like a suite
		// header to the parser, as it does upstream.
		name: "phpunit", parser: "parse_log_phpunit",
		log: `PHPUnit 9.6.19 by Sebastian Bergmann and contributors.

Runtime:       PHP 8.1.2

 ✔ Before any suite
Calculation (PhpOffice\PhpSpreadsheetTests\Calculation\Calculation)
 ✔ Binary comparison operation with data set #0
 ✘ Binary comparison operation with data set #1
   │
   │ Failed asserting that false is true.
   │
 ↩ Branch pruning formula parsing
Xlsx (PhpOffice\PhpSpreadsheetTests\Writer\Xlsx\Xlsx)
 ✔ Write

Time: 00:00.350, Memory: 20.00 MB
`,
		want: map[string]string{
			"None > Before any suite":                                    "PASSED",
			"Calculation > Binary comparison operation with data set #0": "PASSED",
			"Calculation > Binary comparison operation with data set #1": "FAILED",
			"Calculation > Branch pruning formula parsing":               "SKIPPED",
			"Xlsx > Write": "PASSED",
		},
	},
	{
		// minitest -v: "Class#test_name = 0.00 s = ." where shoulda-style
		// names are sentences ending in a period, which the parser cuts.
		name: "minitest", parser: "parse_log_minitest",
		log: `Run options: -v --seed 4242

# Running:

TestFilters#test_: filters array_to_sentence_string should return an empty string with no items. = 0.00 s = .
TestFilters#test_: filters jsonify should convert drop to json. = 0.01 s = F
TestSite#test_: site should error on a bad config. = 0.00 s = E
TestSite#test_no_period = 0.00 s = .

3 runs, 3 assertions, 1 failures, 1 errors, 0 skips
`,
		want: map[string]string{
			"TestFilters#test_: filters array_to_sentence_string should return an empty string with no items": "PASSED",
			"TestFilters#test_: filters jsonify should convert drop to json":                                  "FAILED",
			"TestSite#test_: site should error on a bad config":                                               "FAILED",
		},
	},
	{
		// cucumber --format progress with the scenario name before its
		// steps' marks, as the parser expects: the last mark decides.
		name: "cucumber", parser: "parse_log_cucumber",
		log: `Create sites ....
Basic site with layout inside a subfolder ......F
Post with a link ...

3 scenarios (1 failed, 2 passed)
`,
		want: map[string]string{
			"Create sites": "PASSED",
			"Basic site with layout inside a subfolder": "FAILED",
			"Post with a link":                          "PASSED",
		},
	},
	{
		// test-unit verbose (fluentd, faker): "name:<tabs>.: (time)",
		// sub-tests "test: name:"; an F followed by a word character (here
		// a non-ASCII letter, which Python's \b counts as one) is no result.
		name: "ruby_unit", parser: "parse_log_ruby_unit",
		log: `Loaded suite test/plugin/test_out_file
Started
FileOutputTest: 
  test_configure:						.: (0.001201)
  test_write:							F
  test: emits with compression:					E
  test: omitted when unsupported:				O
  test_fancy:	Fébrile
  test_plain:	Foo
Finished in 0.5 seconds.
`,
		want: map[string]string{
			"test_configure":           "PASSED",
			"test_write":               "FAILED",
			"emits with compression":   "FAILED",
			"omitted when unsupported": "SKIPPED",
		},
	},
	{
		// rspec --format json piped through the harness's jq transform:
		// "full description - status".
		name: "rspec_transformed_json", parser: "parse_log_rspec_transformed_json",
		log: `RuboCop::Cop::Style::Foo registers an offense - passed
RuboCop::Cop::Style::Foo handles a - b - failed
RuboCop::Cop::Style::Foo is pending - pending
`,
		want: map[string]string{
			"RuboCop::Cop::Style::Foo registers an offense": "PASSED",
			"RuboCop::Cop::Style::Foo handles a - b":        "FAILED",
		},
	},
	{
		// Redis/Valkey's Tcl runner: "[ok]: name (N ms)", a failure's
		// " in tests/…" cut.
		name: "redis", parser: "parse_log_redis",
		log: `[ready]: 1234
[ok]: SET and GET an item (1 ms)
[err]: INCR fails against key with spaces in tests/unit/type/incr.tcl
[skip]: Big list test
[ignore]: Not supported in cluster mode
[ok]: Basic ZADD and score update - listpack (3 ms)
[1/2 done]: unit/type/incr (1 seconds)
`,
		want: map[string]string{
			"SET and GET an item":                    "PASSED",
			"INCR fails against key with spaces":     "FAILED",
			"Big list test":                          "SKIPPED",
			"Not supported in cluster mode":          "SKIPPED",
			"Basic ZADD and score update - listpack": "PASSED",
		},
	},
	{
		// automake's test driver (jq's make check).
		name: "jq", parser: "parse_log_jq",
		log: `PASS: tests/mantest
FAIL: tests/jqtest
PASS: tests/shtest
============================================================================
# TOTAL: 3
`,
		want: map[string]string{"tests/mantest": "PASSED", "tests/jqtest": "FAILED", "tests/shtest": "PASSED"},
	},
	{
		// doctest binary run with -s -r=xml (nlohmann/json): nested
		// SubCases, an Expression that failed inside the inner one.
		name: "doctest", parser: "parse_log_doctest",
		log: `+ ./tests/test-element_access2 -s -r=xml
<?xml version="1.0" encoding="UTF-8"?>
<doctest binary="tests/test-element_access2">
  <Options order_by="file" rand_seed="0" first="0" last="4294967295" abort_after="0" subcase_filter_levels="2147483647" case_sensitive="false" no_throw="false" no_skip="false"/>
  <TestSuite>
    <TestCase name="element access 2" filename="tests/src/unit-element_access2.cpp" line="17">
      <SubCase name="object" filename="tests/src/unit-element_access2.cpp" line="19">
        <SubCase name="access specified element with bounds checking" filename="tests/src/unit-element_access2.cpp" line="24">
          <Expression success="true" type="CHECK" filename="tests/src/unit-element_access2.cpp" line="26">
            <Original>j.at("integer") == Json(1)</Original>
            <Expanded>1 == 1</Expanded>
          </Expression>
          <Expression success="false" type="CHECK" filename="tests/src/unit-element_access2.cpp" line="27">
            <Original>j.at("boolean") == Json(true)</Original>
            <Expanded>false == true</Expanded>
          </Expression>
        </SubCase>
      </SubCase>
      <OverallResultsAsserts successes="1" failures="1" test_case_success="false"/>
    </TestCase>
    <TestCase name="empty" filename="tests/src/unit-element_access2.cpp" line="90">
      <SubCase name="nothing checked" filename="tests/src/unit-element_access2.cpp" line="91"/>
    </TestCase>
  </TestSuite>
  <OverallResultsAsserts successes="1" failures="1"/>
  <OverallResultsTestCases successes="1" failures="1"/>
</doctest>
`,
		want: map[string]string{
			"element access 2 > object":                                        "FAILED",
			"element access 2 > access specified element with bounds checking": "FAILED",
			"empty > nothing checked":                                          "PASSED",
		},
	},
	{
		// micropython's tests/run-tests.py.
		name: "micropython", parser: "parse_log_micropython_test",
		log: `pass  basics/int_big_add.py
FAIL  basics/string_format.py
skip  thread/mutate_bytearray.py
2 tests performed (10 individual testcases)
`,
		want: map[string]string{"basics/int_big_add.py": "PASSED", "basics/string_format.py": "FAILED", "thread/mutate_bytearray.py": "SKIPPED"},
	},
	{
		// googletest (fmtlib): results with their time; the summary's
		// FAILED list has no time and is not read.
		name: "googletest", parser: "parse_log_googletest",
		log: `[==========] Running 3 tests from 1 test suite.
[ RUN      ] format_test.escape
[       OK ] format_test.escape (0 ms)
[ RUN      ] format_test.args
test/format-test.cc:42: Failure
[  FAILED  ] format_test.args (1 ms)
[ RUN      ] format_test.param/0
[       OK ] format_test.param/0 (0 ms)
[==========] 3 tests from 1 test suite ran. (1 ms total)
[  FAILED  ] 1 test, listed below:
[  FAILED  ] format_test.args
`,
		want: map[string]string{"format_test.escape": "PASSED", "format_test.args": "FAILED", "format_test.param/0": "PASSED"},
	},
	{
		// jest --verbose as Calypso runs it, per package after the jest
		// command; describe blocks by indentation; the summary ends a run.
		name: "calypso", parser: "parse_log_calypso",
		log: `+ yarn run test-client ./node_modules/.bin/jest client/state/selectors
PASS client/state/selectors/test/index.js
  selectors
    getSite()
      ✓ should return null if not found (3ms)
      ✕ should return the site
    isJetpack()
      ✓ should be false
Test Suites: 1 failed, 1 total
  ✓ not read after the summary
`,
		want: map[string]string{
			"selectors - getSite() - should return null if not found": "PASSED",
			"selectors - getSite() - should return the site":          "FAILED",
			"selectors - isJetpack() - should be false":               "PASSED",
		},
	},
	{
		// Karma with the progress reporter (Chart.js), colours included;
		// the pattern wants "Chrome <version>", so a "Chrome Headless"
		// browser's lines are not read.
		name: "chart_js", parser: "parse_log_chart_js",
		log: "\x1b[32mChrome 120.0.6099.109 (Linux x86_64)\x1b[0m Chart.helpers.canvas clipArea should clip FAILED\n" +
			"Chrome Headless 120.0.6099.109 (Linux x86_64) Chart.helpers.core should merge FAILED\n" +
			"\tExpected 1 to be 2.\n" +
			"Chrome Headless 120.0.6099.109 (Linux x86_64): Executed 2 of 2 (1 FAILED) (0.2 secs / 0.1 secs)\n",
		want: map[string]string{"Chart.helpers.canvas clipArea should clip ": "FAILED"},
	},
	{
		// Marked's test runner lists failures as "N) name".
		name: "marked", parser: "parse_log_marked",
		log: `Failures:
1) Marked Code spans should handle backticks 
  Message:
    Expected false to be true.
2) Marked em should parse
`,
		want: map[string]string{"Marked Code spans should handle backticks": "FAILED", "Marked em should parse": "FAILED"},
	},
	{
		// mocha's spec reporter failure list (p5.js), with a JSON block
		// and an XML block in the output that the parser removes first (a
		// JSON block closes only at a "}" line with nothing before it); a
		// title whose lines are not ever more indented is not a test.
		name: "p5js", parser: "parse_log_p5js",
		log: `  2 passing (2s)
  2 failing

  1) Core
       p5.prototype.loadJSON
         should call the callback:
     AssertionError: expected false to be true
{
  "a": 1,
  "b": "2) x:"
}
<p>3) not: a test</p>
  2) Rendering
     should resize:
  3)
  flat:
     Error: boom
`,
		want: map[string]string{
			"Core:p5.prototype.loadJSON:should call the callback": "FAILED",
			"Rendering:should resize":                             "FAILED",
		},
	},
	{
		// jest's per-file lines (react-pdf), with and without times.
		name: "react_pdf", parser: "parse_log_react_pdf",
		log: `PASS packages/layout/tests/text/layoutText.test.js (5.123 s)
FAIL packages/renderer/tests/svg.test.js (12.2s)
PASS packages/stylesheet/tests/flex.test.js
FAIL packages/textkit/tests/justify.test.js (850 ms)
`,
		want: map[string]string{
			"packages/layout/tests/text/layoutText.test.js":   "PASSED",
			"packages/renderer/tests/svg.test.js":             "FAILED",
			"packages/stylesheet/tests/flex.test.js":          "PASSED",
			"packages/textkit/tests/justify.test.js (850 ms)": "FAILED",
		},
	},
	{
		// jest --json through the harness's jq transform.
		name: "jest_json", parser: "parse_log_jest_json",
		log:  "[PASSED] Map > set\n  [FAILED] Map > delete\n[SKIPPED] Map > x\n",
		want: map[string]string{"Map > set": "PASSED", "Map > delete": "FAILED"},
	},
	{
		// vitest --reporter=verbose (vuejs/core).
		name: "vitest", parser: "parse_log_vitest",
		log: ` ✓ packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > effect 3ms
 × packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > flush timing 12ms
 ↓ packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > skipped case [skipped]
 ✓ packages/reactivity/__tests__/ref.spec.ts > ref > counts 2
`,
		want: map[string]string{
			"packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > effect":       "PASSED",
			"packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > flush timing": "FAILED",
			"packages/runtime-core/__tests__/apiWatch.spec.ts > api: watch > skipped case": "SKIPPED",
			"packages/reactivity/__tests__/ref.spec.ts > ref > counts":                     "PASSED",
		},
	},
	{
		// karma-mocha-reporter (Preact): suites by indentation after
		// "Starting browser", "✔|✖ name" tests, SUMMARY: ends. A shallower
		// line closes one block only, so "Fragment" closes "hydrate" and is
		// not itself opened: upstream's logic is brittle, and kept.
		name: "karma", parser: "parse_log_karma",
		log: `START:
Starting browser ChromeHeadless
  render()
    ✔ should render a div
    ✖ should render nothing
    hydrate
      ✔ should hydrate
  Fragment
    ✔ should render children
SUMMARY:
✔ 3 tests completed
`,
		want: map[string]string{
			"render() > should render a div":      "PASSED",
			"render() > should render nothing":    "FAILED",
			"render() > hydrate > should hydrate": "PASSED",
			"render() > should render children":   "PASSED",
		},
	},
}

func TestLanguageParsers(t *testing.T) {
	for _, c := range langCases {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Parsers[c.parser]
			if !ok {
				t.Fatalf("%s is not registered", c.parser)
			}
			got, err := p(c.log)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s:\n got %v\nwant %v", c.parser, got, c.want)
			}
		})
	}
}

// TestParserErrors: where the Python parser raises, the port errors, and
// the log is then not graded as resolved.
func TestParserErrors(t *testing.T) {
	for name, c := range map[string]struct{ parser, log string }{
		"doctest report without its end":   {"parse_log_doctest", "<doctest binary=\"t\">\n<TestCase name=\"a\"/>\n"},
		"doctest report that is not XML":   {"parse_log_doctest", "<doctest <<>> </doctest>"},
		"calypso pass line not indented":   {"parse_log_calypso", "x ./node_modules/.bin/jest a\n✓ flush left\n"},
		"karma closes more than it opened": {"parse_log_karma", "Starting browser X\n    a\n   c\n  d\n"},
		"django ERROR: with no space":      {"parse_log_django", "ERROR:nospace\n"},
	} {
		t.Run(name, func(t *testing.T) {
			if sm, err := Parsers[c.parser](c.log); err == nil {
				t.Fatalf("no error; map %v", sm)
			}
			g := Grade{InstanceID: "x__y-1", LogParser: c.parser, EvalType: EvalPassAndFail, FailToPass: []string{"a"}}
			if r := EvalReport(g, evalLog(c.log, 0)); r.Resolved || !strings.Contains(r.Reason, "log parser failed") {
				t.Errorf("report %+v", r)
			}
		})
	}
}

func TestInstanceParsers(t *testing.T) {
	for id, want := range map[string]string{
		"jekyll__jekyll-9141":             "parse_log_minitest",
		"jekyll__jekyll-8771":             "parse_log_cucumber",
		"immutable-js__immutable-js-2006": "parse_log_jest",
		"immutable-js__immutable-js-2005": "parse_log_jest_json",
	} {
		name := "parse_log_jekyll"
		if strings.HasPrefix(id, "immutable") {
			name = "parse_log_immutable_js"
		}
		got, err := ParserFor(name, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if reflect.ValueOf(got).Pointer() != reflect.ValueOf(Parsers[want]).Pointer() {
			t.Errorf("%s: not %s", id, want)
		}
	}
	for _, c := range [][2]string{{"parse_log_jekyll", "jekyll__jekyll-1"}, {"parse_log_jekyll", "nodash"}, {"parse_log_immutable_js", "immutable-js__immutable-js-1"}, {"parse_log_nope", "a-1"}} {
		if _, err := ParserFor(c[0], c[1]); err == nil {
			t.Errorf("%s for %s: no error", c[0], c[1])
		}
	}
}

// TestTapRealNodeLog grades the TAP output of a real run of Node's test
// runner (node --test --test-reporter=tap) with parse_log_tap, which
// three.js and axios use; Node prints "ok 3 - name # SKIP" for a skipped
// test, which the parser reads as passed, as upstream's does.
func TestTapRealNodeLog(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node", "node is not installed")
	}
	dir := t.TempDir()
	src := `const test = require('node:test'); const assert = require('node:assert');
test('adds', () => assert.strictEqual(1 + 1, 2));
test('subtracts', () => assert.strictEqual(2 - 1, 0));
test('skipped one', { skip: true }, () => {});
`
	if err := os.WriteFile(filepath.Join(dir, "calc.test.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "--test", "--test-reporter=tap", "calc.test.js")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code == 0 {
		t.Fatalf("node --test exited 0 with a failing test:\n%s", out)
	}
	got, err := Parsers["parse_log_tap"](string(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"- adds": "PASSED", "- subtracts": "FAILED", "- skipped one # SKIP": "PASSED"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v\nlog:\n%s", got, want, out)
	}
	g := Grade{InstanceID: "axios__axios-1", LogParser: repoParsers["axios/axios"], EvalType: EvalPassAndFail,
		FailToPass: []string{"- subtracts"}, PassToPass: []string{"- adds"}}
	if r := EvalReport(g, evalLog(string(out), code)); r.Resolved || !r.PatchSuccessfullyApplied || len(r.Tests.F2PFailure) != 1 {
		t.Errorf("report %+v", r)
	}
	g.FailToPass = []string{"- adds"}
	g.PassToPass = []string{"- skipped one # SKIP"}
	if r := EvalReport(g, evalLog(string(out), code)); !r.Resolved {
		t.Errorf("report %+v, want resolved", r)
	}
}

// TestEveryRepoParserIsRegistered: MAP_REPO_TO_PARSER names only parsers
// this build has, so no instance of those repos is refused for its parser.
func TestEveryRepoParserIsRegistered(t *testing.T) {
	for repo, name := range repoParsers {
		if _, err := ParserForInstance(name, "a__b-2006", "3"); err != nil && !strings.Contains(err.Error(), "unknown instance") {
			t.Errorf("%s: %s is not registered: %v", repo, name, err)
		}
	}
	if repoParsers["phpoffice/phpspreadsheet"] != "parse_log_phpunit" {
		t.Error("php repos missing from the map")
	}
}

// pythonEdgeCases pin down where Python's str and re differ from Go's
// defaults, and the XML corner cases; each expected map is what the
// Python parser gives.
var pythonEdgeCases = []parserCase{
	{name: "str.strip strips \\x1c-\\x1f and Unicode spaces", parser: "parse_log_jq",
		log: "\x1cPASS: a\x1f\n\u00a0FAIL:\u2003b\n", want: map[string]string{"a": "PASSED", "b": "FAILED"}},
	{name: "seaborn skips bare status lines", parser: "parse_log_seaborn",
		log: "FAILED\n PASSED \nPASSED a\nb PASSED c\n", want: map[string]string{"a": "PASSED", "b": "PASSED"}},
	{name: "only SKIPPED [N] is a skip summary", parser: "parse_log_pytest",
		log: "SKIPPED [2] t.py:3: why\nPASSED [100%]\nERROR: [3]\n", want: map[string]string{"[100%]": "PASSED", "[3]": "ERROR:"}},
	{name: "\\d matches any Unicode digit", parser: "parse_log_tap",
		log: "ok ٣ name\n", want: map[string]string{"name": "PASSED"}},
	{name: "\\s matches a vertical tab", parser: "parse_log_ruby_unit",
		log: "test_a:\v.\n", want: map[string]string{"test_a": "PASSED"}},
	{name: "nested XML blocks are removed before failures are read", parser: "parse_log_p5js",
		log: "<a><a>x</a> 1) t\n   u:\n</a>\n  2) v\n    w:\n<b>\n", want: map[string]string{"v:w": "FAILED"}},
}

func TestPythonEdgeCases(t *testing.T) {
	for _, c := range pythonEdgeCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parsers[c.parser](c.log)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s:\n got %v\nwant %v", c.parser, got, c.want)
			}
		})
	}
}

package swebench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestRegistryMatchesReference: this build knows the registry's parsers
// by the package's names, maps each repository to a parser the package
// maps it to, and grades the package's FAIL_ONLY repositories fail-only.
func TestRegistryMatchesReference(t *testing.T) {
	ref := loadReferenceRegistry(t)
	var ours []string
	for n := range Parsers {
		ours = append(ours, n)
	}
	for n := range instanceParsers {
		ours = append(ours, n)
	}
	for n := range versionParsers {
		ours = append(ours, n)
	}
	sort.Strings(ours)
	for _, n := range ref.Registry {
		if !slices.Contains(ours, n) {
			t.Errorf("%s is in swebench %s's PARSER_REGISTRY but not in Parsers", n, ref.Version)
		}
	}
	for _, n := range ours {
		if !slices.Contains(ref.Registry, n) {
			t.Errorf("%s is in Parsers but not in swebench %s's PARSER_REGISTRY", n, ref.Version)
		}
	}
	for repo, names := range ref.RepoParsers {
		got, ok := repoParsers[repo]
		switch {
		case len(names) == 0 && ok:
			t.Errorf("%s: the package maps it to a function outside its registry (the harness cannot grade it), we to %s", repo, got)
		case len(names) > 0 && !slices.Contains(names, got):
			t.Errorf("%s: parser %q, the package's is one of %v", repo, got, names)
		}
	}
	for repo, got := range repoParsers {
		if _, ok := ref.RepoParsers[repo]; !ok && !strings.EqualFold(repo, "BurntSushi/ripgrep") {
			t.Errorf("%s (parser %s) is in no MAP_REPO_TO_PARSER_* of the package", repo, got)
		}
	}
	var fo []string
	for r := range failOnlyRepos {
		fo = append(fo, r)
	}
	sort.Strings(fo)
	if !slices.Equal(fo, ref.FailOnlyRepos) {
		t.Errorf("failOnlyRepos %v, FAIL_ONLY_REPOS %v", fo, ref.FailOnlyRepos)
	}
}

// parseResult is one parser's answer on one log, as the driver reports
// it: a status map, or the exception the package raised.
type parseResult struct {
	StatusMap map[string]string `json:"status_map"`
	Error     string            `json:"error"`
}

type parseLog struct {
	Log        string `json:"log"`
	InstanceID string `json:"instance_id"`
	Version    string `json:"version"`
	label      string
}

// TestParsersMatchReference runs every parser of the registry, here and
// in the package, on every log of the corpus: the real runner logs, the
// logs of the table tests, and generated ones. The status maps must be
// equal, and a parser must fail here exactly where the package's raises.
func TestParsersMatchReference(t *testing.T) {
	ref := loadReferenceRegistry(t)
	logs := parserCorpus(t)
	var ans [][]parseResult
	callReference(t, map[string]any{"op": "parse", "parsers": ref.Registry, "logs": logs}, &ans)
	if len(ans) != len(logs) {
		t.Fatalf("driver answered %d logs of %d", len(ans), len(logs))
	}
	diffs := map[string]int{}
	results := map[string]int{} // logs a parser found tests in, per parser
	for i, l := range logs {
		for j, name := range ref.Registry {
			want := ans[i][j]
			if len(want.StatusMap) > 0 {
				results[name]++
			}
			p, err := ParserForInstance(name, l.InstanceID, l.Version)
			var got map[string]string
			if err == nil {
				got, err = p(l.Log)
			}
			bad := ""
			switch {
			case err != nil && want.Error == "":
				bad = fmt.Sprintf("Go fails (%v), the package gives %v", err, want.StatusMap)
			case err == nil && want.Error != "":
				bad = fmt.Sprintf("the package raises %s, Go gives %v", want.Error, got)
			case err == nil && !sameMap(got, want.StatusMap):
				bad = fmt.Sprintf("maps differ:\n  Go:      %v\n  package: %v", got, want.StatusMap)
			}
			if bad == "" {
				continue
			}
			// Report a few per parser: one cause tends to recur.
			if diffs[name]++; diffs[name] <= 3 {
				t.Errorf("%s on %s (instance %s, version %q):\n%s\nlog: %q", name, l.label, l.InstanceID, l.Version, bad, clip(l.Log, 600))
			}
		}
	}
	for name, n := range diffs {
		if n > 3 {
			t.Errorf("%s: %d differing logs in all", name, n)
		}
	}
	// A parser that finds no test in any log is compared on nothing.
	for _, name := range ref.Registry {
		if results[name] == 0 {
			t.Errorf("no log of the corpus has a test %s finds: add one in its format", name)
		}
	}
	t.Logf("%d logs, %d parsers compared", len(logs), len(ref.Registry))
}

func sameMap(a, b map[string]string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// versions are those parse_log_next and parse_log_lighthouse choose by,
// and some float() reads oddly or not at all.
var versions = []string{"1.27", "9.5", "10.0", "10.2", "2.0", "3", "nan", "-inf", "1_0", "x", "٣"}

// jsLogs are logs in the formats of the JavaScript repos' runners, with
// the corner cases of their parsers.
var jsLogs = []string{
	// highlight.js (mocha spec reporter)
	"  markup\n    ✓ renders a tag (5ms)\n    ✔ renders an attribute\n  1) fails here (12ms)\n  javascript\n    ✓ keyword\n\n  3 passing (20ms)\n  1 failing\n  1) markup\n    at /x.js:1:2\n",
	// prism (mocha --reporter json)
	"$ ./node_modules/.bin/mocha tests/run.js --reporter json\n{\n  \"stats\": {\"tests\": 2},\n  \"failures\": [{\"fullTitle\": \"lang a\"}],\n  \"passes\": [{\"fullTitle\": \"lang b\"}, {\"fullTitle\": \"lang a\"}]\n}\ndone\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": [], \"passes\": [{\"fullTitle\": 3}, {\"fullTitle\": \"t\"}]}\n./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": \"\", \"passes\": {}}\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": [1], \"passes\": []}\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\n{\"passes\": []}\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\nnot json\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": \"ab\", \"passes\": []}\n",
	"./node_modules/.bin/mocha tests/run.js --reporter json\n{\"failures\": [{\"fullTitle\": [1]}], \"passes\": []}\n",
	// eslint (mocha --reporter min)
	"  2 passing\n  2 failing\n\n  1) RuleTester\n       no-unused-vars\n         reports x:\n     AssertionError [ERR_ASSERTION]: Should have 1 error\n  2) Linter  verify()\n     TypeError: x is not a function\n",
	// bpmn-js and openlayers (karma)
	"\x1b[2KPhantomJS 2.1.1 (Linux 0.0.0) Modeler should import FAILED\n2KPhantomJS 2.1.1 (Linux x86_64) Viewer renders FAILED\nChrome Headless 120.0.0 (Linux x86_64) a b FAILED\nHeadlessChrome 120.0 (Linux 0.0.0) c d FAILED\n",
	"Chrome Headless 120.0.6099.109 (Linux x86_64) ol/Map renders FAILED\nChrome 120.0 (Linux x86_64) ol/View fits FAILED\n  1) rendering\n     draws a circle\n     Error: mismatch\ncase circle-style: mismatch 0.5\ncase ok-one': ok\n",
	// grommet, carbon, lighthouse's jest (jest per-file lines)
	"PASS src/js/components/Box/__tests__/Box-test.tsx (5.2 s)\nFAIL src/js/components/Grid/__tests__/Grid-test.tsx (12.3 s)\nPASS src/a.test.js (300 ms)\nPASS src/b.test.js\nFAIL src/c.test.js (1.5s)\nPASS  src/d.test.js (12ms)\n",
	// next v1 (karma-mocha-reporter), next v2 (cypress)
	"$ xvfb-run karma start\nprelude\n xvfb-run  karma\nStarting browser Chrome\n  Button\n    ✓ renders\n    ✗ clicks\n    nested\n      ✓ deep\nLOG: 'noise'\n  input\n  Checkbox\n    ✓ checks\nAssertionError: # x\n  detail\n\n    ✓ after assertion\nTOTAL: 4 SUCCESS\n    ✓ after total\n",
	"  Running:  button.spec.js)\n\n\n  Button\n    ✓ renders (30ms)\n    1) clicks\n    ✓ hovers (5ms)\n  Running:  input.spec.js)\n\n\n  Input\n    ✓ types (1ms)\n",
	// lighthouse mocha (9.5, 10.x) and JSON (below 3)
	"running 2 test files\n  core\n    ✔ gathers (15ms)\n    1) audits (3ms)\n    nested\n      ✔ deep\n  2 passing\n  1 failing\nrunning 1 test files\n  cli\n    ✔ runs\n",
	"./node_modules/.bin/mocha --reporter json\n{\n  \"passes\": [\n    {\n      \"fullTitle\": \"a b\",\n      \"x\": 1\n    }\n  ],\n  \"failures\": [\n    {\n      \"fullTitle\": \"c d\",\n    }\n  ],\n}\n",
	// quarto (deno test)
	"\x1b[0m[smoke] render /tmp/abc.qmd ... \x1b[32mok\x1b[0m\n[smoke] render /tmp/abc.qmd again ... \x1b[31mFAILED\n[unit] /tmp/dir/x and /tmp/dir/y ... \x1b[32mok\n[unit] no status here\n[unit] test result: 1 passed 1 failed 2 steps\n[smoke] \x1b[34mINFO something\ntest result: [smoke] x\n[unit] after ... 32mok\nERRORS\n[unit] never read ... 32mok\n",
}

// instanceIDs cycle over the logs so that the parsers choosing by
// instance (jekyll, immutable-js) pick each of theirs, and refuse others.
var instanceIDs = []string{
	"x__y-1", "jekyll__jekyll-9141", "jekyll__jekyll-8771", "immutable-js__immutable-js-2006",
	"immutable-js__immutable-js-2005", "nodash", "jekyll__jekyll-1",
}

func parserCorpus(t *testing.T) []parseLog {
	t.Helper()
	var logs []parseLog
	// Each log is parsed as for each instance id in ids, and (as for
	// ids[0]) for each version in vers.
	add := func(label, log string, ids, vers []string) {
		// JSON would carry invalid UTF-8 to Python as U+FFFD: the two
		// sides would parse different logs.
		if !utf8.ValidString(log) {
			t.Fatalf("%s is not UTF-8", label)
		}
		for _, id := range ids {
			logs = append(logs, parseLog{Log: log, InstanceID: id, label: label})
		}
		for _, v := range vers {
			logs = append(logs, parseLog{Log: log, InstanceID: ids[0], Version: v, label: label})
		}
	}
	files, err := filepath.Glob("testdata/reallogs/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("no real logs: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		add(f, string(b), instanceIDs, versions)
	}
	for _, c := range langCases {
		add("langCases/"+c.name, c.log, instanceIDs, nil)
	}
	for _, c := range pythonEdgeCases {
		add("pythonEdgeCases/"+c.name, c.log, instanceIDs, nil)
	}
	for i, l := range jsLogs {
		add(fmt.Sprintf("jsLogs[%d]", i), l, []string{"x__y-1"}, versions)
	}
	r := rand.New(rand.NewPCG(16, 5))
	for i := range 400 {
		add(fmt.Sprintf("generated log %d", i), generatedLog(r), []string{instanceIDs[i%len(instanceIDs)]}, []string{versions[i%len(versions)]})
	}
	return logs
}

// Pieces the generated logs are made of: test names with the characters
// parsers trip on, the lines each runner prints, and what a terminal or a
// truncating pipe does to them.
var (
	genNames = []string{
		"test_a", "tests/test_x.py::test_b", "test_p[a b]", "test_p[/tmp/x/y.txt]", "test_p[//net/x]",
		"test_p[/a/*]", "t.py::C::test_ü", "test_٣", "Suite.Case", "a > b > c", "describe it works",
		"test_x (mod.Tests.test_x)", "should do – things", "TestFoo/sub_test", "tests::mod::name",
		"x.test", "[100%]", "[3]", "name with  two spaces", "a - b", "名前", "test\u00a0nbsp", "",
	}
	genStatuses = []string{"PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS", "passed", "failed", "ok", "OK", "FAIL", "E", "F"}
	genSpaces   = []string{" ", "  ", "\t", "\v", "\f", "\x1c", "\u00a0", "\u2003", "\u3000", "\u0085"}
	genLines    = []func(r *rand.Rand, n, s, sp string) string{
		func(r *rand.Rand, n, s, sp string) string { return s + sp + n },
		func(r *rand.Rand, n, s, sp string) string { return s + sp + n + " - " + "assert 1 == 2 - x" },
		func(r *rand.Rand, n, s, sp string) string { return n + sp + s },
		func(r *rand.Rand, n, s, sp string) string { return n + " " + s + " " + "[ 50%]" },
		func(r *rand.Rand, n, s, sp string) string { return s },
		func(r *rand.Rand, n, s, sp string) string { return sp + s + sp },
		func(r *rand.Rand, n, s, sp string) string { return "SKIPPED [1] t.py:3: unconditional skip" },
		func(r *rand.Rand, n, s, sp string) string {
			return n + " ... " + pick(r, "ok", "OK", " OK", "FAIL", "ERROR", "skipped 'x'")
		},
		func(r *rand.Rand, n, s, sp string) string { return n + " ... " },
		func(r *rand.Rand, n, s, sp string) string { return "ok" },
		func(r *rand.Rand, n, s, sp string) string {
			return pick(r, "FAIL:", "ERROR:") + pick(r, "", " ", sp) + n
		},
		func(r *rand.Rand, n, s, sp string) string {
			return n + " ... Testing against Django installed in '/x' with up to 8 processes\nSystem check identified no issues (0 silenced).\nok"
		},
		func(r *rand.Rand, n, s, sp string) string { return n + " ... Internal Server Error: /x/y/\nok" },
		func(r *rand.Rand, n, s, sp string) string {
			return n + " ... System check identified no issues (0 silenced)\nok"
		},
		func(r *rand.Rand, n, s, sp string) string { return "--version is equivalent to version" },
		func(r *rand.Rand, n, s, sp string) string {
			return "Applying sites.0002_alter_domain_unique...test_no_migrations (x.Tests) ... ok"
		},
		func(r *rand.Rand, n, s, sp string) string { return n + pick(r, " ok", " F", " E", " f", " s") },
		func(r *rand.Rand, n, s, sp string) string { return "________ sympy/x/tests/t.py:" + n + " ________" },
		func(r *rand.Rand, n, s, sp string) string {
			return "--- " + pick(r, "PASS", "FAIL", "SKIP") + ": " + n + " (0.00s)"
		},
		func(r *rand.Rand, n, s, sp string) string {
			return "test " + n + " ... " + pick(r, "ok", "FAILED", "ignored")
		},
		func(r *rand.Rand, n, s, sp string) string {
			return sp + pick(r, "✓", "✕", "○", "×", "↓", "✔", "✖") + " " + n + pick(r, "", " (5 ms)", " 12ms")
		},
		func(r *rand.Rand, n, s, sp string) string {
			return pick(r, "ok", "not ok") + " " + pick(r, "1", "2", "٣") + " " + n
		},
		func(r *rand.Rand, n, s, sp string) string { return "[" + pick(r, "PASSED", "FAILED") + "] " + n },
		func(r *rand.Rand, n, s, sp string) string {
			return "[       " + pick(r, "OK", "FAILED") + " ] " + n + " (0 ms)"
		},
		func(r *rand.Rand, n, s, sp string) string { return pick(r, "PASS", "FAIL", "SKIP", "XFAIL") + ": " + n },
		func(r *rand.Rand, n, s, sp string) string { return pick(r, "pass", "FAIL", "skip") + "  " + n },
		func(r *rand.Rand, n, s, sp string) string { return "[ok]: " + n + " (1 ms)" },
		func(r *rand.Rand, n, s, sp string) string { return "[err]: " + n },
		func(r *rand.Rand, n, s, sp string) string {
			return "    [junit] [" + pick(r, "PASS", "FAIL", "ERR") + "] " + n
		},
		func(r *rand.Rand, n, s, sp string) string {
			return n + " > " + n + " " + pick(r, "PASSED", "FAILED", "SKIPPED")
		},
		func(r *rand.Rand, n, s, sp string) string {
			return "[INFO] Tests run: 3, Failures: 1, Errors: 0, Skipped: 0"
		},
		func(r *rand.Rand, n, s, sp string) string {
			return "[ERROR] " + n + "  Time elapsed: 0.1 s  <<< FAILURE!"
		},
		func(r *rand.Rand, n, s, sp string) string { return n + " - " + pick(r, "passed", "failed") },
		func(r *rand.Rand, n, s, sp string) string { return n + ": " + pick(r, ".", "E", "F", "O") },
		func(r *rand.Rand, n, s, sp string) string { return n + ". = 0.00 s = " + pick(r, ".", "F", "E") },
		func(r *rand.Rand, n, s, sp string) string {
			return n + " " + strings.Repeat(".", 1+r.IntN(3)) + pick(r, ".", "F")
		},
		func(r *rand.Rand, n, s, sp string) string { return pick(r, " ✔ ", " ✘ ", " ↩ ", " ☢ ") + n },
		func(r *rand.Rand, n, s, sp string) string { return "  " + pick(r, "1", "2") + ") " + n + ":" },
		func(r *rand.Rand, n, s, sp string) string { return "Chrome 120.0 (Linux x86_64) " + n + " FAILED" },
		func(r *rand.Rand, n, s, sp string) string { return "Starting browser ChromeHeadless" },
		func(r *rand.Rand, n, s, sp string) string {
			return pick(r, "PASS", "FAIL") + " tests/" + n + ".test.js"
		},
		func(r *rand.Rand, n, s, sp string) string { return "x ./node_modules/.bin/jest " + n },
		func(r *rand.Rand, n, s, sp string) string { return "Test Suites: 1 failed, 2 passed, 3 total" },
		func(r *rand.Rand, n, s, sp string) string {
			return `<testcase name="` + n + `" classname="C"` + pick(r, "/>", "><failure/></testcase>", "><skipped/></testcase>")
		},
		func(r *rand.Rand, n, s, sp string) string { return `<doctest binary="t">` },
		func(r *rand.Rand, n, s, sp string) string { return `</doctest>` },
		func(r *rand.Rand, n, s, sp string) string { return `{"a": [1, {"b": "` + n + `"}]}` },
		func(r *rand.Rand, n, s, sp string) string {
			return "> Task :" + n + pick(r, "", " FAILED", " SKIPPED", " UP-TO-DATE")
		},
		func(r *rand.Rand, n, s, sp string) string { return n + " (" + n + ") ... ok" },
		func(r *rand.Rand, n, s, sp string) string { return "test: " + n + ":" + sp + pick(r, ".", "E", "F") },
		func(r *rand.Rand, n, s, sp string) string { return "" },
		func(r *rand.Rand, n, s, sp string) string {
			return strings.Repeat("=", 10) + " 1 failed, 2 passed in 0.1s " + strings.Repeat("=", 10)
		},
	}
)

func pick(r *rand.Rand, xs ...string) string { return xs[r.IntN(len(xs))] }

// generatedLog is a log of 1 to 40 lines drawn from the pieces, some
// coloured, some ending in \r\n, and some cut short.
func generatedLog(r *rand.Rand) string {
	var b strings.Builder
	for range 1 + r.IntN(40) {
		line := genLines[r.IntN(len(genLines))](r, genNames[r.IntN(len(genNames))], genStatuses[r.IntN(len(genStatuses))], genSpaces[r.IntN(len(genSpaces))])
		switch r.IntN(10) {
		case 0:
			line = "\x1b[32m" + line + "\x1b[0m"
		case 1:
			line = "[1m" + line + "[0m"
		case 2:
			if rs := []rune(line); len(rs) > 1 {
				line = string(rs[:r.IntN(len(rs))])
			}
		case 3:
			line = pick(r, "  ", "\t", "\x1c") + line + pick(r, " ", "\r", "\x1f")
		}
		b.WriteString(line)
		b.WriteString(pick(r, "\n", "\n", "\n", "\r\n", "\n\n"))
	}
	out := b.String()
	if r.IntN(4) == 0 {
		out = strings.TrimRight(out, "\n")
	}
	return out
}

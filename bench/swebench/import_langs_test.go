package swebench

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportOtherLanguages: v5 instances of Java, PHP, Ruby, C and
// JavaScript repos import with their parsers; classic ones import from the
// harness's per-repo specs, a version the specs do not have is refused, and
// an instance the jekyll dispatcher does not know is refused with the
// reason.
func TestImportOtherLanguages(t *testing.T) {
	script := "cd /testbed\ngit apply -v - <<'EOF_114329324912'\nx\nEOF_114329324912\n: '>>>>> Start Test Output'\nrun tests\n: '>>>>> End Test Output'\n"
	v5 := func(repo, id, parser string) map[string]any {
		return map[string]any{"repo": repo, "instance_id": id, "base_commit": "abc", "FAIL_TO_PASS": []string{"a"}, "PASS_TO_PASS": []string{},
			"image": "img", "log_parser": parser, "eval_type": "pass_and_fail", "eval_script": script}
	}
	insts := []map[string]any{
		v5("google/gson", "google__gson-1", "parse_log_maven"),
		v5("phpoffice/phpspreadsheet", "phpoffice__phpspreadsheet-2", "parse_log_phpunit"),
		v5("jekyll/jekyll", "jekyll__jekyll-9141", "parse_log_jekyll"),
		v5("fluent/fluentd", "fluent__fluentd-3", ""), // parser from MAP_REPO_TO_PARSER
		v5("redis/redis", "redis__redis-4", "parse_log_redis"),
		v5("apache/lucene", "apache__lucene-5", "parse_log_gradle_custom"),
		v5("jekyll/jekyll", "jekyll__jekyll-1234", "parse_log_jekyll"),
		v5("acme/unknown", "acme__unknown-6", ""),
		{"repo": "google/gson", "instance_id": "google__gson-7", "base_commit": "abc", "version": "2.10", "FAIL_TO_PASS": "[\"a\"]", "PASS_TO_PASS": "[]"},
		// Classic instances of other languages build from the harness's
		// tables: Java (common builder), JavaScript.
		{"repo": "google/gson", "instance_id": "google__gson-8", "base_commit": "abc", "version": "2024", "test_patch": "", "FAIL_TO_PASS": "[\"a\"]", "PASS_TO_PASS": "[]"},
		{"repo": "mrdoob/three.js", "instance_id": "mrdoob__three.js-9", "base_commit": "abc", "version": "27395", "test_patch": "", "FAIL_TO_PASS": "[\"a\"]", "PASS_TO_PASS": "[]"},
	}
	var lines []string
	for _, in := range insts {
		b, _ := json.Marshal(in)
		lines = append(lines, string(b))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "i.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("swebench://i.jsonl")
	res, err := Importer{}.Import(context.Background(), u, dir)
	if err != nil {
		t.Fatal(err)
	}
	var ok []string
	for _, r := range res.Records {
		ok = append(ok, r.ID)
	}
	if want := "google__gson-1 phpoffice__phpspreadsheet-2 jekyll__jekyll-9141 fluent__fluentd-3 redis__redis-4 apache__lucene-5 google__gson-8 mrdoob__three.js-9"; strings.Join(ok, " ") != want {
		t.Errorf("imported %v, want %s", ok, want)
	}
	reasons := map[string]string{}
	for _, r := range res.Refused {
		reasons[r.Task] = r.Reason
	}
	for id, want := range map[string]string{
		"jekyll__jekyll-1234": "parse_log_jekyll: unknown instance id",
		"acme__unknown-6":     "not in SWE-bench's MAP_REPO_TO_PARSER",
		"google__gson-7":      `no harness specs for google/gson version "2.10"`,
	} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("%s refused with %q, want it to say %q", id, reasons[id], want)
		}
	}
	if len(res.Refused) != 3 {
		t.Errorf("refused %+v", res.Refused)
	}
}

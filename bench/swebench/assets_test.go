package swebench

import (
	"encoding/json"
	"strings"
	"testing"
)

func v5Instance(assets json.RawMessage) Instance {
	return Instance{
		Repo: "processing/p5.js", InstanceID: "processing__p5.js-1", BaseCommit: "abc",
		FailToPass: []string{"a"}, LogParser: "parse_log_p5js", EvalType: EvalFailOnly, Image: "img",
		EvalScript: strings.Join([]string{
			"#!/bin/bash", "set -uxo pipefail", "cd /testbed",
			"git checkout abc test/unit/webgl/p5.Texture.js",
			"git apply --verbose --reject - <<'EOF_114329324912'", "diff --git a/x b/x", "EOF_114329324912",
			": '>>>>> Start Test Output'", "npm test", ": '>>>>> End Test Output'",
		}, "\n"),
		ImageAssets: assets,
	}
}

// TestImageAssets: the files are downloaded as get_download_img_commands
// writes the commands, after the test files are reset and before the test
// patch is applied; the field may be an object or a JSON string of one.
func TestImageAssets(t *testing.T) {
	obj := `{"test_patch": [{"path": "test/unit/assets/./shot.png", "url": "https://example.invalid/a.png"}, {"path": "base.png", "url": "https://example.invalid/b.png"}]}`
	str, _ := json.Marshal(obj)
	want := "git checkout abc test/unit/webgl/p5.Texture.js\n" +
		"mkdir -p test/unit/assets\ncurl -o test/unit/assets/./shot.png https://example.invalid/a.png\nchmod 777 test/unit/assets/./shot.png\n" +
		"mkdir -p .\ncurl -o base.png https://example.invalid/b.png\nchmod 777 base.png\n" +
		"git apply --verbose --reject - <<'EOF_114329324912'\n"
	for name, raw := range map[string]string{"object": obj, "JSON string": string(str)} {
		script, err := EvalScript(v5Instance(json.RawMessage(raw)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(script, want) {
			t.Errorf("%s: eval script lacks the downloads before the test patch:\n%s", name, script)
		}
	}
	for _, raw := range []string{"", "null", `""`, "{}", `"{}"`} {
		script, err := EvalScript(v5Instance(json.RawMessage(raw)))
		if err != nil || strings.Contains(script, "curl") {
			t.Errorf("image_assets %q: err %v\n%s", raw, err, script)
		}
	}
	for _, raw := range []string{`{"test_patch": [{"path": "x.png"}]}`, `{"test_patch": "x"}`, `"{"`} {
		if _, err := EvalScript(v5Instance(json.RawMessage(raw))); err == nil {
			t.Errorf("image_assets %s: no error", raw)
		}
	}
	in := v5Instance(json.RawMessage(obj))
	in.EvalScript = "cd /testbed\n: '>>>>> Start Test Output'\nnpm test\n: '>>>>> End Test Output'"
	if _, err := EvalScript(in); err == nil || !strings.Contains(err.Error(), "no test patch line") {
		t.Errorf("no test patch line: %v", err)
	}
}

func TestPyPathParent(t *testing.T) {
	for in, want := range map[string]string{
		"a/b/c.png": "a/b", "c.png": ".", "/x/y.png": "/x", "/y.png": "/", "a//b/./c": "a/b",
		"../a/b": "../a", "//srv/a": "//srv", "///srv/a": "/srv", "a/b/": "a", "./c.png": ".",
	} {
		if got := pyPathParent(in); got != want {
			t.Errorf("parent(%q) = %q, want %q", in, got, want)
		}
	}
}

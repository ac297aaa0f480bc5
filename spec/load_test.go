package spec

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestExamplesLoadAndValidate(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := Load(p)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if err := f.Spec.Validate(); err != nil {
				t.Fatalf("Spec.Validate: %v", err)
			}
			// The decoded spec survives a JSON round trip unchanged.
			if got := f.Spec.DeepCopy(); !reflect.DeepEqual(got, f.Spec) {
				a, _ := json.Marshal(f.Spec)
				b, _ := json.Marshal(got)
				t.Fatalf("round trip changed the spec:\n%s\n%s", a, b)
			}
			if !filepath.IsAbs(f.Dir) {
				t.Errorf("Dir %q is not absolute", f.Dir)
			}
		})
	}
}

func TestDecodeFixCalc(t *testing.T) {
	f, err := Load("testdata/fix-calc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := f.Spec
	if s.Name != "fix-calc" {
		t.Errorf("name = %q, want the file's base name", s.Name)
	}
	if !s.IsAgentRun() {
		t.Fatal("fix-calc is an agent run")
	}
	if got := s.Dataset.Records[0].Input.Text; !strings.HasPrefix(got, "calc.py has two bugs") {
		t.Errorf("input = %q", got)
	}
	if s.Target.Connector != "anthropic" || s.Target.Model != "claude-sonnet-5" || s.Target.Temperature == nil || *s.Target.Temperature != 0 {
		t.Errorf("target = %+v", s.Target.ModelRef)
	}
	b := s.Harness.Builtin
	if b.MaxSteps != 40 || b.Budget.USD != 2.5 || b.Budget.WallClock.D() != 15*time.Minute || b.Pricing["claude-sonnet-5"].Output != 15 {
		t.Errorf("builtin = %+v budget %+v", b, b.Budget)
	}
	e := s.Environment
	if e.Sandbox.Workdir != "/testbed" || e.Sandbox.MemoryMB != 4096 || e.Sandbox.MinIsolation != "namespaced" {
		t.Errorf("sandbox = %+v", e.Sandbox)
	}
	if !strings.Contains(e.Files["calc.py"], "return a - b") || e.Env["PYTHONDONTWRITEBYTECODE"] != "1" {
		t.Errorf("files/env = %v %v", e.Files, e.Env)
	}
	if got := e.Checker.Command; !reflect.DeepEqual(got, []string{"python3", "-m", "pytest", "-q"}) {
		t.Errorf("checker command = %q", got)
	}
	if e.Checker.Timeout.D() != 10*time.Minute || e.CommandTimeout.D() != 2*time.Minute {
		t.Errorf("timeouts = %v %v", e.Checker.Timeout, e.CommandTimeout)
	}
	wantEv := []string{"task-success", "code-quality", "policy-violations", "agent-efficiency"}
	for i, ev := range s.Evaluators {
		if ev.Name != wantEv[i] {
			t.Errorf("evaluators[%d] = %q, want %q", i, ev.Name, wantEv[i])
		}
	}
	if mb := s.Evaluators[1].MergeBar; mb == nil || *mb != 4 || s.Evaluators[1].Weights["correctness"] != 2 {
		t.Errorf("code-quality options = %+v", s.Evaluators[1])
	}
	if s.Trials != 3 || s.Judge.Model != "claude-opus-5-5" {
		t.Errorf("trials %d judge %+v", s.Trials, s.Judge)
	}
	if c := s.Caps; c == nil || c.CommandOutputBytes() != 256<<10 || c.TrialMemoryBytes() != 32<<20 || c.EventTextBytes() != DefaultEventTextKB<<10 {
		t.Errorf("caps = %+v", c)
	}
	// Defaults fill what the file left out, and only that.
	if *s.Retries != DefaultRetries || s.Concurrency != 2*runtime.NumCPU() || s.TrialTimeout.D() != 30*time.Minute {
		t.Errorf("run defaults: retries %d concurrency %d timeout %v", *s.Retries, s.Concurrency, s.TrialTimeout)
	}
	if !reflect.DeepEqual(e.Sandbox.Ladder, []string{"firecracker", "bwrap", "landlock"}) || e.Sandbox.Cgroup != "auto" {
		t.Errorf("sandbox defaults: %+v", e.Sandbox)
	}
}

func TestDecodeQA(t *testing.T) {
	f, err := Load("testdata/qa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := f.Spec
	if s.Name != "capitals" {
		t.Errorf("name = %q: an explicit name wins over the file name", s.Name)
	}
	if s.IsAgentRun() || s.Environment != nil || s.Harness != nil {
		t.Errorf("defaults turned a model run into an agent run: env %+v harness %+v", s.Environment, s.Harness)
	}
	if *s.Retries != 0 || s.Concurrency != 4 {
		t.Errorf("explicit retries 0 / concurrency 4 lost: %d %d", *s.Retries, s.Concurrency)
	}
	r := s.Dataset.Records
	if r[0].Expected.String() != "Paris" {
		t.Errorf("expected = %s", r[0].Expected)
	}
	want := []InputMessage{{Role: "system", Content: "Answer with one word."}, {Role: "user", Content: "What is the capital of Germany?"}}
	if !reflect.DeepEqual(r[1].Input.Messages, want) || r[1].Input.Prompt() != want[1].Content {
		t.Errorf("messages = %+v", r[1].Input.Messages)
	}
	if got := string(r[1].Metadata["tags"]); got != `["geo","europe"]` {
		t.Errorf("metadata.tags = %s", got)
	}
	if got := string(r[1].Metadata["difficulty"]); got != `1` {
		t.Errorf("metadata.difficulty = %s", got)
	}
	if sc := s.Target.Script; sc == nil || sc.Default[0].Content != "Paris" || sc.Rules[0].Replies[0].Content != "Berlin" {
		t.Errorf("script = %+v", sc)
	}
	if !s.Evaluators[0].IgnoreCase || s.Evaluators[1].Name != "includes" {
		t.Errorf("evaluators = %+v", s.Evaluators)
	}
}

func TestDecodeFeatures(t *testing.T) {
	src := `
dataset:
  records:
    - id: a
      input: hi
      expected: {b: 1, a: [x, 2.5, true, null], c: !!str 12}
target: &m {connector: openai, model: gpt-5}
judge:
  <<: *m
  model: gpt-5-mini
harness:
  builtin:
environment:
  env: {DEBUG: 1, RATIO: 0.50, ON: true}
evaluators: [task-success]
`
	f, err := Parse("features.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Spec
	// JSON values keep key order and number text.
	if got := string(s.Dataset.Records[0].Expected); got != `{"b":1,"a":["x",2.5,true,null],"c":"12"}` {
		t.Errorf("expected = %s", got)
	}
	// Aliases and merge keys resolve; explicit keys win over merged ones.
	if s.Judge.Connector != "openai" || s.Judge.Model != "gpt-5-mini" || s.Target.Model != "gpt-5" {
		t.Errorf("judge %+v target %+v", s.Judge, s.Target.ModelRef)
	}
	// "builtin:" with no value is present with defaults, not absent.
	if s.Harness.Builtin == nil || s.Harness.Builtin.MaxSteps != DefaultMaxSteps {
		t.Errorf("builtin = %+v", s.Harness.Builtin)
	}
	// Scalars in string fields keep their text.
	if e := s.Environment.Env; e["DEBUG"] != "1" || e["RATIO"] != "0.50" || e["ON"] != "true" {
		t.Errorf("env = %v", e)
	}
	if s.Name != "features" {
		t.Errorf("name = %q", s.Name)
	}
	if err := f.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestPos(t *testing.T) {
	f, err := Load("testdata/fix-calc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want Pos
	}{
		{"environment", Pos{17, 1}},
		{"environment.sandbox.network", Pos{30, 14}},
		{"environment.checker.parser", Pos{40, 13}},
		{"environment.env.PYTHONDONTWRITEBYTECODE", Pos{27, 34}},
		{"evaluators[0]", Pos{44, 5}},
		{"evaluators[0].name", Pos{44, 5}},
		{"evaluators[1].merge_bar", Pos{46, 16}},
		{"evaluators[1]", Pos{45, 5}},
		{"dataset.records[0].id", Pos{4, 11}},
		{`environment.files["calc.py"]`, Pos{20, 14}},
		{`environment.files["calc.py"].nested`, Pos{20, 14}},
		// Not in the file: the nearest ancestor that is.
		{"environment.sandbox.ladder", Pos{28, 3}},
		{"evaluators[1].mode", Pos{45, 5}},
		{"nowhere", Pos{}},
	} {
		if got := f.Pos(tc.path); got != tc.want {
			t.Errorf("Pos(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
	err = f.Errorf("environment.checker.parser", "parser %q is not registered", "foo:bar")
	var e *Error
	if !errors.As(err, &e) || err.Error() != `testdata/fix-calc.yaml:40:13: parser "foo:bar" is not registered` {
		t.Errorf("Errorf = %v", err)
	}
}

// Decode gives other packages (a script_file, a record's environment) the
// same checks as Parse.
func TestDecode(t *testing.T) {
	var sc Script
	src := "default:\n  - content: hi\n    tool_calls: [{name: bash, arguments: {cmd: ls}}]\nrecords:\n  r1: [{content: a}, {status: 429}]\n"
	if err := Decode("s.yaml", []byte(src), &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Default[0].ToolCalls[0].Name != "bash" || string(sc.Default[0].ToolCalls[0].Arguments) != `{"cmd":"ls"}` || sc.Records["r1"][1].Status != 429 {
		t.Errorf("script = %+v", sc)
	}
	err := Decode("s.yaml", []byte("default: [{contnet: hi}]\n"), &sc)
	checkErrors(t, err, []string{`s.yaml:1:12: unknown field "contnet" in default[0]; did you mean "content"?`})
	if err := Decode("s.yaml", []byte("a: 1"), sc); err == nil {
		t.Error("Decode into a non-pointer succeeded")
	}
}

package spec

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("run-spec.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("run-spec.json")
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return sch
}

func yamlInstance(t *testing.T, src []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The examples, as written and as decoded (defaults applied), are valid
// under the schema.
func TestSchemaAcceptsExamples(t *testing.T) {
	sch := compileSchema(t)
	paths, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(yamlInstance(t, src)); err != nil {
			t.Errorf("%s as written: %v", p, err)
		}
		f, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(f.Spec)
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err := sch.Validate(v); err != nil {
			t.Errorf("%s decoded: %v", p, err)
		}
	}
}

func TestSchemaRejects(t *testing.T) {
	sch := compileSchema(t)
	for name, tc := range map[string]struct{ src, want string }{
		"bad enum":          {base + "environment: {sandbox: {network: maybe}}\n", "network"},
		"bad ladder rung":   {base + "environment: {sandbox: {ladder: [bwarp]}}\n", "ladder"},
		"unknown field":     {base + "environment: {setup_netwrk: allow}\n", "setup_netwrk"},
		"bad duration":      {base + "trial_timeout: 10 minutes\n", "trial_timeout"},
		"bad evaluator":     {base + "evaluators: [task-sucess]\n", "evaluators"},
		"bad parser":        {base + "environment: {checker: {parser: 'a b'}}\n", "parser"},
		"input as a number": {"dataset: {records: [{id: a, input: 3}]}\ntarget: {connector: openai, model: m}\n", "input"},
		"missing target":    {"dataset: {path: x}\n", "target"},
		"negative cap":      {base + "caps: {command_output_kb: -1}\n", "command_output_kb"},
		"cap too large":     {base + "caps: {model_response_mb: 5000}\n", "model_response_mb"},
		"unknown cap":       {base + "caps: {tool_output_kb: 5}\n", "tool_output_kb"},
	} {
		err := sch.Validate(yamlInstance(t, []byte(tc.src)))
		if err == nil {
			t.Errorf("%s: schema accepted %q", name, tc.src)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error does not mention %q: %v", name, tc.want, err)
		}
	}
}

func TestSchemaDescriptionsAndEnums(t *testing.T) {
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
		Defs map[string]struct {
			Properties map[string]struct {
				Description string   `json:"description"`
				Enum        []string `json:"enum"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if d := s.Properties["trials"].Description; !strings.Contains(d, "how many times each record runs") {
		t.Errorf("trials description = %q", d)
	}
	// Target flattens ModelRef, docs included.
	if d := s.Defs["Target"].Properties["connector"]; !strings.Contains(d.Description, "OpenAI-compatible") || len(d.Enum) != 3 {
		t.Errorf("target.connector = %+v", d)
	}
	if e := s.Defs["SandboxPolicy"].Properties["network"].Enum; strings.Join(e, ",") != "deny,allowlist,allow" {
		t.Errorf("network enum = %v", e)
	}
	for _, name := range []string{"command_output_kb", "model_response_mb", "event_text_kb", "trial_memory_mb"} {
		if d := s.Defs["Caps"].Properties[name].Description; !strings.Contains(d, "default") {
			t.Errorf("caps.%s description = %q", name, d)
		}
	}
}

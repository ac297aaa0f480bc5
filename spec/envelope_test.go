package spec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// wrap indents a run file under spec: in an EvalRun, returning the file
// and how many lines come before the run file's first line.
func wrap(run string, evalsi string) (string, int) {
	head := "apiVersion: evals.si/v1alpha1\nkind: EvalRun\nmetadata:\n  name: from-k8s\n  namespace: team-a\nspec:\n"
	if evalsi != "" {
		head += evalsi
	}
	var b strings.Builder
	b.WriteString(head)
	for _, l := range strings.SplitAfter(run, "\n") {
		if l != "" && l != "\n" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return b.String(), strings.Count(head, "\n")
}

func TestEnvelopeLoadsAsTheRunFile(t *testing.T) {
	plainPath := filepath.Join("..", "examples", "agents", "fix-calc-offline.yaml")
	raw, err := os.ReadFile(plainPath)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Parse("fix-calc-offline.yaml", raw)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := wrap(string(raw), "  evalsi:\n    server: https://evalsid.evals:8080\n    project: team-a\n    tokenSecretRef: {name: evalsi-token, key: token}\n")
	f, err := Parse("evalrun.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse of the envelope: %v", err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !reflect.DeepEqual(f.Spec, plain.Spec) {
		a, _ := json.Marshal(plain.Spec)
		b, _ := json.Marshal(f.Spec)
		t.Fatalf("the envelope's spec differs from the run file's:\n%s\n%s", a, b)
	}
	if f.Envelope == nil || f.Envelope.Name != "from-k8s" || f.Envelope.Namespace != "team-a" {
		t.Fatalf("envelope = %+v", f.Envelope)
	}
	var blk struct {
		Server, Project string
		TokenSecretRef  struct{ Name, Key string }
	}
	if err := json.Unmarshal(f.Envelope.Evalsi, &blk); err != nil || blk.Server != "https://evalsid.evals:8080" || blk.TokenSecretRef.Key != "token" {
		t.Fatalf("evalsi block = %s (%v)", f.Envelope.Evalsi, err)
	}
	if plain.Envelope != nil {
		t.Errorf("a plain run file has an envelope: %+v", plain.Envelope)
	}
}

func TestEnvelopeNamesTheRun(t *testing.T) {
	doc, _ := wrap("dataset: {records: [{id: a, input: hi}]}\ntarget: {connector: scripted, model: m}\n", "")
	f, err := Parse("evalrun.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if f.Spec.Name != "from-k8s" {
		t.Errorf("name = %q, want metadata.name", f.Spec.Name)
	}
}

func TestEnvelopeErrorsPointIntoTheFile(t *testing.T) {
	run := "dataset:\n  records: [{id: a, input: hi}]\ntarget:\n  conector: scripted\n"
	doc, before := wrap(run, "")
	cases := []struct {
		name, doc string
		line, col int
		msg       string
	}{
		// target.conector is on the run file's 4th line, indented by two more.
		{"misspelt field inside spec", doc, before + 4, 5, `unknown field "conector"`},
		{"wrong kind", strings.Replace(doc, "kind: EvalRun", "kind: Pod", 1), 2, 7, `kind is "Pod"`},
		{"wrong version", strings.Replace(doc, "evals.si/v1alpha1", "evals.si/v2", 1), 1, 13, `apiVersion is "evals.si/v2"`},
		{"unknown top-level key", strings.Replace(doc, "metadata:", "metdata:", 1), 3, 1, `did you mean "metadata"?`},
		{"no spec", "apiVersion: evals.si/v1alpha1\nkind: EvalRun\nmetadata: {name: x}\n", 1, 1, "needs a spec"},
		{"spec not a mapping", "apiVersion: evals.si/v1alpha1\nkind: EvalRun\nspec: [1]\n", 3, 7, "spec must be a mapping"},
		{"kind without apiVersion", "kind: EvalRun\nspec: {}\n", 1, 1, "has no apiVersion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("evalrun.yaml", []byte(c.doc))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want Errors", err)
			}
			for _, e := range es {
				if strings.Contains(e.Error(), c.msg) {
					if e.Line != c.line || e.Column != c.col {
						t.Errorf("%q at %d:%d, want %d:%d", e.Error(), e.Line, e.Column, c.line, c.col)
					}
					return
				}
			}
			t.Errorf("no error says %q: %v", c.msg, err)
		})
	}
}

// FuzzEnvelope: no EvalRun file, however malformed, panics the loader.
func FuzzEnvelope(f *testing.F) {
	doc, _ := wrap("dataset: {records: [{id: a, input: hi}]}\ntarget: {connector: scripted, model: m}\n", "  evalsi: {server: http://x}\n")
	f.Add([]byte(doc))
	f.Add([]byte("apiVersion: evals.si/v1alpha1\nkind: EvalRun\nspec: &s {evalsi: *s}\n"))
	f.Add([]byte("kind: EvalRun\nspec: {evalsi: 1, <<: {dataset: 2}}\n"))
	f.Add([]byte("apiVersion: [1]\nkind: {a: b}\nmetadata: [x]\nspec: null\n"))
	f.Add([]byte("{apiVersion: evals.si/v1alpha1, kind: EvalRun, spec: {evalsi: {}}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Parse("evalrun.yaml", data)
	})
}

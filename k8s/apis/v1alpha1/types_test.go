package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"evals.si/internal/testenv"
	"evals.si/k8s/apis/v1alpha1"
	"evals.si/spec"
)

func jsonKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// The EvalRun's top-level spec keys are the run file's, plus evalsi: a
// field added to spec.Spec must be added to the CRD too.
func TestSpecKeysMatchRunFile(t *testing.T) {
	got := slices.DeleteFunc(jsonKeys(reflect.TypeFor[v1alpha1.EvalRunSpec]()), func(k string) bool { return k == spec.EnvelopeBlock })
	want := jsonKeys(reflect.TypeFor[spec.Spec]())
	if !slices.Equal(got, want) {
		t.Fatalf("EvalRunSpec has keys %v; the run file has %v", got, want)
	}
}

// The committed CRDs are what scripts/gen-crds.sh makes from these types.
func TestCRDsAreGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen")
	}
	root := filepath.Join("..", "..", "..")
	// Only the cached controller-gen (.ci/setup installs it): tests reach
	// no address off this machine, the module proxy included.
	offline := append(os.Environ(), "GOPROXY=off")
	probe := exec.Command("bash", "scripts/gen-crds.sh", "--cached")
	probe.Dir = root
	probe.Env = offline
	if out, err := probe.CombinedOutput(); err != nil {
		testenv.Missing(t, "controller-gen", string(out))
	}
	out := t.TempDir()
	gen := exec.Command("bash", "scripts/gen-crds.sh", "--cached")
	gen.Dir = root
	gen.Env = append(offline, "OUT="+out)
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-crds.sh: %v\n%s", err, b)
	}
	made, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	committed, _ := filepath.Glob(filepath.Join(root, "deploy", "crds", "evals.si_*.yaml"))
	if len(made) == 0 || len(made) != len(committed) {
		t.Fatalf("generated %v, committed %v", made, committed)
	}
	for _, m := range made {
		a, _ := os.ReadFile(m)
		b, err := os.ReadFile(filepath.Join(root, "deploy", "crds", filepath.Base(m)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("deploy/crds/%s is not what scripts/gen-crds.sh makes (%v); run the script and commit its output", filepath.Base(m), err)
		}
	}
}

// DeepCopy copies: changing the copy leaves the original alone.
func TestDeepCopyIsDeep(t *testing.T) {
	retries := int32(2)
	er := &v1alpha1.EvalRun{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: v1alpha1.EvalRunSpec{
			Dataset:    apiextensionsv1.JSON{Raw: []byte(`{"path":"a.jsonl"}`)},
			Evaluators: []apiextensionsv1.JSON{{Raw: []byte(`"exact-match"`)}},
			Retries:    &retries,
		},
		Status: v1alpha1.EvalRunStatus{Summary: &v1alpha1.RunSummary{Scores: map[string]string{"a": "1"}}},
	}
	cp := er.DeepCopy()
	cp.Spec.Dataset.Raw[2] = 'X'
	cp.Spec.Evaluators[0].Raw[1] = 'X'
	*cp.Spec.Retries = 5
	cp.Status.Summary.Scores["a"] = "0"
	if string(er.Spec.Dataset.Raw) != `{"path":"a.jsonl"}` || string(er.Spec.Evaluators[0].Raw) != `"exact-match"` || *er.Spec.Retries != 2 || er.Status.Summary.Scores["a"] != "1" {
		t.Fatalf("the copy shares memory with the original: %+v", er)
	}
}

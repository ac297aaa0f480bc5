package main

import (
	"os"
	"path/filepath"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/benchimage"
	"evals.si/spec"
)

// TestImageMirrorFlag runs a Harbor sample task (its Dockerfile says FROM
// ubuntu:24.04, which this machine cannot pull) under the oracle agent,
// the image coming from the local oci-layout through --image-mirror: once
// with no mirror in the spec, once overriding the spec's broken mirror for
// the same reference.
func TestImageMirrorFlag(t *testing.T) {
	requireBwrap(t)
	img := benchimage.Ref(t, "../..")
	harbor, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "benchdata", "harbor"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(harbor); err != nil {
		testenv.Missing(t, "benchdata", harbor+" is not there")
	}
	write := func(envYAML string) string {
		s := `name: mirror-flag
dataset:
  uri: "harbor://` + harbor + `?tasks=hello-workdir&network=deny"
target:
  agent: {oracle: {}}
evaluators: [task-success]
environment:
` + envYAML + `
  sandbox:
    ladder: [bwrap]
`
		p := filepath.Join(t.TempDir(), "spec.yaml")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	db := filepath.Join(t.TempDir(), "db")

	t.Run("flag alone", func(t *testing.T) {
		r := evalsi(t, db, "run", "-f", write("  env: {}"), "--json", "--image-mirror", "ubuntu:24.04="+img)
		if r.code != 0 || r.json.Errored != 0 || r.json.Scores["task-success"] != 1 {
			t.Fatalf("exit %d errored %d scores %v\n%s\n%s", r.code, r.json.Errored, r.json.Scores, r.stdout, r.stderr)
		}
	})
	t.Run("flag wins over the spec", func(t *testing.T) {
		p := write("  image_mirrors:\n    ubuntu:24.04: oci-layout:/nonexistent/evalsi-image")
		// The spec's mirror alone fails the trial as an infrastructure error.
		if r := evalsi(t, db, "run", "-f", p, "--json"); r.code != exitErrored || r.json.Errored != 1 {
			t.Fatalf("spec mirror to a missing layout: exit %d errored %d\n%s", r.code, r.json.Errored, r.stderr)
		}
		r := evalsi(t, db, "run", "-f", p, "--json", "--image-mirror", "ubuntu:24.04="+img)
		if r.code != 0 || r.json.Errored != 0 || r.json.Scores["task-success"] != 1 {
			t.Fatalf("exit %d errored %d scores %v\n%s\n%s", r.code, r.json.Errored, r.json.Scores, r.stdout, r.stderr)
		}
	})
}

func TestImageMirrorFlagErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "db")
	p := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(p, []byte("name: x\n"), 0o644)
	for _, args := range [][]string{
		{"run", "-f", p, "--image-mirror", "ubuntu:24.04"},
		{"run", "-f", p, "--image-mirror", "=oci-layout:/x"},
		{"run", "-f", p, "--image-mirror", "a=b", "--image-mirror", "a=c"},
		{"run", "--resume", "abc", "--image-mirror", "a=b"},
	} {
		r := evalsi(t, db, args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

func TestImageMirrorsApply(t *testing.T) {
	m := imageMirrors{}
	for _, v := range []string{"ubuntu:24.04=oci-layout:/img", "docker.io/=mirror.test:5000/"} {
		if err := m.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	f := parseSpec(t, "name: x\nenvironment:\n  image_mirrors:\n    ubuntu:24.04: oci-layout:/old\n    python:3.13: oci-layout:/py\n")
	m.apply(f)
	want := map[string]string{"ubuntu:24.04": "oci-layout:/img", "python:3.13": "oci-layout:/py", "docker.io/": "mirror.test:5000/"}
	if got := f.Environment.ImageMirrors; len(got) != len(want) || got["ubuntu:24.04"] != want["ubuntu:24.04"] || got["python:3.13"] != want["python:3.13"] || got["docker.io/"] != want["docker.io/"] {
		t.Errorf("mirrors %v, want %v", got, want)
	}
	// No environment in the spec: one is made to hold the mirrors.
	f = parseSpec(t, "name: x\n")
	m.apply(f)
	if f.Environment == nil || f.Environment.ImageMirrors["docker.io/"] != "mirror.test:5000/" {
		t.Errorf("environment %+v", f.Environment)
	}
}

func parseSpec(t *testing.T, yaml string) *spec.Spec {
	t.Helper()
	f, err := spec.Parse("spec.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return f.Spec
}

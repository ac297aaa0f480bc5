package checker

import (
	"testing"

	"evals.si/spec"
)

// The checker's command runs as cfg.User while its files stay root's, as
// a Dockerfile's COPY leaves them: a checker user cannot change them.
func TestRunAsTheCheckersUser(t *testing.T) {
	sb := newSandbox(t)
	cfg := spec.Checker{
		User:    "nobody",
		Files:   map[string]string{"/tmp/graded.txt": "x"},
		Command: []string{"sh", "-c", `test "$(id -un)" = nobody && test "$(stat -c %u /tmp/graded.txt)" = 0 && ! (echo y > /tmp/graded.txt) 2>/dev/null`},
	}
	v, err := Run(t.Context(), sb, cfg, testWorkdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Pass {
		t.Fatalf("verdict %+v: the command did not run as nobody over root's files", v)
	}
}

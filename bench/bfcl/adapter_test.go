package bfcl

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"evals.si/internal/testenv"
)

// TestAdapterUnitTests runs the bfcl adapter's own tests
// (python/adapters/bfcl/tests) in its environment: the oracle on every
// sample, the perturbation table against bfcl-eval's checker called side
// by side, multi-turn grading, refused calls and the resource limits. The
// end-to-end runs through the engine are cmd/evalsi's TestBFCL*.
func TestAdapterUnitTests(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "python", "adapters", "bfcl"))
	if err != nil {
		t.Fatal(err)
	}
	python := filepath.Join(dir, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(t, "bfcl adapter", "python/adapters/bfcl/.venv is not installed (bash scripts/python-adapters.sh)")
	}
	cmd := exec.CommandContext(t.Context(), python, "-m", "unittest", "discover", "-s", "tests")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	t.Logf("%s", out)
}

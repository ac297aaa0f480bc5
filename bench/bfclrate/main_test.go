package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestReportRuns keeps the benchmark command working: a few trials through
// the adapter and the direct checker, every line of the report present. It
// checks no figure: the benchmark measures, the test only runs it.
func TestReportRuns(t *testing.T) {
	if _, err := os.Stat(filepath.Join("..", "..", "python", "adapters", "bfcl", ".venv", "bin", "python")); err != nil {
		testenv.Missing(t, "bfcl adapter", "python/adapters/bfcl/.venv is not installed (bash scripts/python-adapters.sh)")
	}
	data, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "benchdata", "bfcl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(data); err != nil {
		testenv.Missing(t, "benchdata", data+" is not there")
	}
	var out bytes.Buffer
	if err := run(context.Background(), options{dataDir: data, category: "simple_python", trials: 2}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BFCL simple_python, 10 trials", "engine + adapter, whole run", "engine + adapter, steady", "bfcl-eval checker, direct", "ratio direct / steady"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// Package benchdata finds the shared benchmark samples for tests: the
// folder ../shared/benchdata beside the module root (never copied into the
// repository).
package benchdata

import (
	"os"
	"path/filepath"
	"testing"

	"evals.si/internal/testenv"
)

// Dir returns benchdata/sub, skipping the test (failing under
// EVALSI_STRICT=1) when the samples are not there.
func Dir(t testing.TB, sub string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			p := filepath.Join(filepath.Dir(d), "shared", "benchdata", sub)
			if _, err := os.Stat(p); err != nil {
				testenv.Missing(t, "benchdata", p+" is not there")
			}
			return p
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", wd)
		}
	}
}

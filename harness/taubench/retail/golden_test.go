package retail

import (
	"os"
	"path/filepath"
	"testing"

	"evals.si/harness/taubench/domaintest"
)

// benchDir is the retail data of the shared benchmark data, relative to
// this package's directory.
const benchDir = "../../../../shared/benchdata/tau2/retail"

// loadBench loads the shared retail data; without it the test is skipped,
// unless EVALSI_STRICT=1 makes that a failure.
func loadBench(t *testing.T) *Data {
	t.Helper()
	if _, err := os.Stat(filepath.Join(benchDir, "db.json")); err != nil {
		if os.Getenv("EVALSI_STRICT") == "1" {
			t.Fatalf("the retail benchmark data is missing: %v", err)
		}
		t.Skipf("the retail benchmark data is missing (%v); EVALSI_STRICT=1 makes this a failure", err)
	}
	d, err := Load(benchDir)
	if err != nil {
		t.Fatal(err)
	}
	return d.(*Data)
}

func TestGolden(t *testing.T) {
	domaintest.Check(t, loadBench(t), "testdata/traces.json")
}

func TestTools(t *testing.T) {
	env, err := loadBench(t).NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	domaintest.CheckTools(t, env.Agent())
}

package telecom

import (
	"os"
	"path/filepath"
	"testing"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/domaintest"
)

// benchData is tau2's telecom data directory in the shared bench data.
const benchData = "../../../../shared/benchdata/tau2/telecom"

// loadBenchData loads the shared data, skipping the test when it is not
// there (failing under EVALSI_STRICT=1).
func loadBenchData(t *testing.T) domain.Data {
	t.Helper()
	if _, err := os.Stat(filepath.Join(benchData, dbFile)); err != nil {
		if os.Getenv("EVALSI_STRICT") == "1" {
			t.Fatalf("the telecom bench data is missing: %v", err)
		}
		t.Skipf("the telecom bench data is missing (%v); set EVALSI_STRICT=1 to fail instead", err)
	}
	d, err := Load(benchData)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestGolden replays what tau2's own code did (every task's gold actions
// and assertions, and the scenarios of scripts/tau2-reference/
// telecom_calls*.json) and compares each tool message and database hash.
func TestGolden(t *testing.T) {
	domaintest.Check(t, loadBenchData(t), filepath.Join("testdata", "traces.json"))
}

func TestTools(t *testing.T) {
	env, err := loadBenchData(t).NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	domaintest.CheckTools(t, env.Agent())
	domaintest.CheckTools(t, env.User())
}

package harbor

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"evals.si/checker"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestRewardThroughChecker runs Harbor-style verifiers in a real sandbox:
// the reward file decides whatever the script's exit code, and a verifier
// that writes no reward is an infrastructure error, not a 0.
func TestRewardThroughChecker(t *testing.T) {
	r := bwraptest.Rung(t)
	reg := checker.NewRegistry()
	RegisterParsers(reg)
	cases := []struct {
		name   string
		script string
		score  float64
		infra  bool
	}{
		{"txt one, script fails", "echo 1 > /logs/verifier/reward.txt; exit 3", 1, false},
		{"json wins over txt", `echo 0 > /logs/verifier/reward.txt; echo '{"reward": 0.5}' > /logs/verifier/reward.json`, 0.5, false},
		{"no reward file", "exit 0", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb, err := r.Create(t.Context(), sandbox.Config{Workdir: "/work/task", StateDir: t.TempDir(), CommandTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(context.Background())
			cfg := spec.Checker{
				Files:   map[string]string{"/work/task/tests/test.sh": c.script},
				Command: []string{"sh", "-c", "mkdir -p /logs/verifier && rm -f /logs/verifier/reward.txt /logs/verifier/reward.json\nbash /work/task/tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt"},
				Parser:  ParserReward,
			}
			v, err := checker.Run(t.Context(), sb, cfg, "/work/task", reg)
			var ie *checker.InfraError
			if c.infra {
				if !errors.As(err, &ie) {
					t.Fatalf("got %+v, %v; want an infrastructure error", v, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Score != c.score || v.Pass != (c.score == 1) {
				t.Errorf("verdict %+v, want score %v", v, c.score)
			}
		})
	}
}

package taubench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"evals.si/harness/taubench/tau2"
	"evals.si/internal/testenv"
)

// benchdata is the shared benchmark samples' tau2 directory.
func benchdata(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "benchdata", "tau2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		testenv.Missing(t, "tau2 samples", "../shared/benchdata/tau2 is not there")
	}
	return dir
}

// domainDir is a directory Load reads for the domain: the shared samples
// for retail and telecom; for airline, whose db.json is not available
// here, the small database of the real schema beside the samples' policy.
func domainDir(t *testing.T, name string) string {
	t.Helper()
	samples := filepath.Join(benchdata(t), name)
	if name != "airline" {
		return samples
	}
	dir := t.TempDir()
	for src, dst := range map[string]string{
		filepath.Join("airline", "testdata", "db.json"): "db.json",
		filepath.Join(samples, "policy.md"):             "policy.md",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type gradeCase struct {
	Name     string         `json:"name"`
	Messages []tau2.Message `json:"messages"`
	Grade    struct {
		Reward    float64            `json:"reward"`
		Breakdown map[string]float64 `json:"reward_breakdown"`
		DBMatch   *bool              `json:"db_match"`
	} `json:"grade"`
}

// tau2's own evaluators graded these conversations (scripts/tau2-reference
// --grades): the oracle's, one that leaves out the information the task
// requires communicated, and one that leaves out the last write. Go's
// Evaluate must give each the same reward, breakdown and database match.
func TestEvaluateMatchesTau2(t *testing.T) {
	for _, name := range DomainNames() {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "grades", name+".json"))
			if err != nil {
				t.Fatalf("the golden grades: %v", err)
			}
			var golden []struct {
				Task  tau2.Task   `json:"task"`
				Cases []gradeCase `json:"cases"`
			}
			if err := json.Unmarshal(raw, &golden); err != nil {
				t.Fatal(err)
			}
			var cache dataCache
			d, err := cache.get(name, domainDir(t, name))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range golden {
				for _, c := range g.Cases {
					n++
					r, err := tau2.Evaluate(d, &g.Task, tau2.AgentStop, c.Messages)
					if err != nil {
						t.Errorf("task %s, %s: %v", g.Task.ID, c.Name, err)
						continue
					}
					if math.Abs(r.Reward-c.Grade.Reward) > 1e-9 {
						t.Errorf("task %s, %s: reward %v, tau2's %v (failed: %v)", g.Task.ID, c.Name, r.Reward, c.Grade.Reward, r.Failed())
					}
					for k, v := range c.Grade.Breakdown {
						if got, ok := r.Breakdown[k]; !ok || got != v {
							t.Errorf("task %s, %s: breakdown %v, tau2's %v", g.Task.ID, c.Name, r.Breakdown, c.Grade.Breakdown)
							break
						}
					}
					if c.Grade.DBMatch != nil && r.DBCheck != nil && r.DBCheck.Match != *c.Grade.DBMatch {
						t.Errorf("task %s, %s: db_match %v, tau2's %v", g.Task.ID, c.Name, r.DBCheck.Match, *c.Grade.DBMatch)
					}
				}
			}
			if n == 0 {
				t.Fatal("no graded conversations")
			}
		})
	}
}

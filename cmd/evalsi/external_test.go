package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/store"
	"evals.si/trajectory"
)

// TestExternalHarnessVerdict runs the Python fix-calc harness with the
// spec's checker removed: the harness's own Check verdict then grades the
// trial (with a checker, the checker wins; TestExamplesOffline covers that).
func TestExternalHarnessVerdict(t *testing.T) {
	requireBwrap(t)
	b, err := os.ReadFile("../../examples/agents/fix-calc-external-python.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start, end := strings.Index(s, "  checker:\n"), strings.Index(s, "  command_timeout:")
	if start < 0 || end < start {
		t.Fatal("fix-calc-external-python.yaml no longer has the checker block this test removes")
	}
	s = s[:start] + s[end:]
	dir := t.TempDir()
	path := filepath.Join(dir, "no-checker.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "evalsi.db")
	r := evalsi(t, db, "run", "-f", path, "--json")
	if r.code != 0 || r.json.Errored != 0 || r.json.Scores["task-success"] != 1 {
		t.Fatalf("exit %d, errored %d, scores %v\nstdout: %s\nstderr: %s", r.code, r.json.Errored, r.json.Scores, r.stdout, r.stderr)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(context.Background(), r.json.RunID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials: %v, %v", trials, err)
	}
	evs, err := st.Events(context.Background(), trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var checker *trajectory.Checker
	for _, e := range evs {
		if e.Kind == trajectory.KindChecker {
			checker = e.Checker
		}
	}
	if checker == nil || !checker.Pass || !strings.Contains(checker.Output, "pyfixcalc") {
		t.Errorf("checker event %+v: want the harness's passing verdict", checker)
	}
}

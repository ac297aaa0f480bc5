package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv/vmtest"
	"evals.si/store"
)

// The microVM rung through the real CLI: a VM per trial under QEMU, with
// the machine's settings given in the spec as embedded mode takes them.

// qemuSettings is the spec's sandbox.qemu block for the test machine.
func qemuSettings(t *testing.T) string {
	t.Helper()
	set := vmtest.Settings(t, "../..")
	ref, _, _ := vmtest.Image(t, "../..")
	return `{kernel: "` + set.Kernel + `", guest: "` + set.Guest + `", default_image: "` + ref + `", memory_mb: 768}`
}

// withSandbox writes fix-calc-offline with extra sandbox lines.
func withSandbox(t *testing.T, name string, lines ...string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/agents/fix-calc-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	add := ""
	for _, l := range lines {
		add += "    " + l + "\n"
	}
	s := strings.Replace(string(b), "    network: deny\n", "    network: deny\n"+add, 1)
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// trialRung is the rung the run's one trial ran on, from its isolation
// report.
func trialRung(t *testing.T, db, runID string) string {
	t.Helper()
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(context.Background(), runID)
	if err != nil || len(trials) == 0 {
		t.Fatalf("trials of %s: %v %v", runID, trials, err)
	}
	var rep struct {
		Rung string `json:"rung"`
	}
	if err := json.Unmarshal(trials[0].Isolation, &rep); err != nil {
		t.Fatalf("isolation report %s: %v", trials[0].Isolation, err)
	}
	return rep.Rung
}

// TestFixCalcOnQEMUScoresAsOnBwrap: the same spec, the same scores, one in
// a VM.
func TestFixCalcOnQEMUScoresAsOnBwrap(t *testing.T) {
	requireBwrap(t)
	qs := qemuSettings(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	bw := evalsi(t, db, "run", "-f", fixCalcOn(t, "bwrap"), "--json")
	if bw.code != 0 || bw.json.Errored != 0 {
		t.Fatalf("bwrap: exit %d errored %d\n%s", bw.code, bw.json.Errored, bw.stderr)
	}
	q := evalsi(t, db, "run", "-f", withSandbox(t, "fix-calc-qemu", "ladder: [qemu]", "qemu: "+qs), "--json")
	if q.code != 0 || q.json.Errored != 0 {
		t.Fatalf("qemu: exit %d errored %d\n%s\n%s", q.code, q.json.Errored, q.stdout, q.stderr)
	}
	if got := trialRung(t, db, q.json.RunID); got != "qemu" {
		t.Errorf("the trial ran on %q, want qemu", got)
	}
	if q.json.Scores["task-success"] != 1 {
		t.Errorf("task-success on qemu = %v", q.json.Scores["task-success"])
	}
	for k, v := range bw.json.Scores {
		if q.json.Scores[k] != v {
			t.Errorf("%s: qemu gave %v, bwrap %v", k, q.json.Scores[k], v)
		}
	}
}

// TestMinIsolationVM: min_isolation vm with no ladder picks the qemu rung
// (the default ladder for vm is firecracker, then qemu), and is refused,
// never downgraded to bwrap, when no VM rung works.
func TestMinIsolationVM(t *testing.T) {
	requireBwrap(t)
	qs := qemuSettings(t)
	db := filepath.Join(t.TempDir(), "evalsi.db")
	r := evalsi(t, db, "run", "-f", withSandbox(t, "vm-picks", "min_isolation: vm", "qemu: "+qs), "--json")
	if r.code != 0 || r.json.Errored != 0 {
		t.Fatalf("exit %d errored %d\n%s\n%s", r.code, r.json.Errored, r.stdout, r.stderr)
	}
	if got := trialRung(t, db, r.json.RunID); got != "qemu" {
		t.Errorf("min_isolation vm ran on %q, want qemu", got)
	}

	// No QEMU on PATH: no VM rung works, and bwrap (which does) is not
	// used instead.
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	r = evalsi(t, db, "run", "-f", withSandbox(t, "vm-refused", "min_isolation: vm", "qemu: "+qs), "--json")
	// Refused before any trial starts, as a spec no rung can run is.
	if r.code != exitUsage || r.json.Trials != 0 {
		t.Fatalf("without QEMU the run was not refused up front: exit %d %+v\n%s", r.code, r.json, r.stderr)
	}
	all := r.stdout + r.stderr
	for _, want := range []string{"no sandbox rung works", "qemu", "firecracker"} {
		if !strings.Contains(all, want) {
			t.Errorf("the refusal does not mention %q:\n%s", want, all)
		}
	}
}

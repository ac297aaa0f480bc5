package planner

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"evals.si/agent/oracle"
	"evals.si/engine"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// A worker's plan has no records: the oracle it holds answers each trial
// from the record the trial is given, records it never saw at plan time,
// as a worker that leases them one by one runs them.
func TestOracleAnswersTheLeasedRecord(t *testing.T) {
	rung := bwraptest.Rung(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state := t.TempDir()
	imgs, err := image.Open(filepath.Join(state, "images"), log)
	if err != nil {
		t.Fatal(err)
	}
	rungs := []sandbox.Rung{rung}
	envs := environment.NewManager(imgs, rungs, filepath.Join(state, "sandboxes"), log)
	t.Cleanup(func() { envs.Close() })
	h := &Host{Envs: envs, Rungs: rungs, ProxyDir: filepath.Join(state, "proxy"), Logger: log}

	f := parseSpec(t, `
dataset: {path: not-read-by-plan.jsonl}
target: {agent: {oracle: {}}}
evaluators: [{name: task-success}]
environment:
  sandbox: {ladder: [bwrap], workdir: /work}
  checker: {command: [sh, -c, 'test "$(cat answer)" = "$(cat want)"']}
`)
	p, err := h.Plan(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	record := func(id, answer, want string) spec.Record {
		sol, err := json.Marshal(oracle.Solution{Command: "echo " + answer + " > answer"})
		if err != nil {
			t.Fatal(err)
		}
		files, err := json.Marshal(map[string]any{"files": map[string]string{"want": want + "\n"}})
		if err != nil {
			t.Fatal(err)
		}
		return spec.Record{ID: id, Input: spec.Input{Text: "solve"}, Metadata: map[string]spec.JSON{
			oracle.MetaSolution: sol, "environment": files,
		}}
	}
	discard := trajectory.SinkFunc(func(trajectory.Event) error { return nil })
	for _, tc := range []struct {
		rec  spec.Record
		pass bool
	}{
		{record("right", "42", "42"), true},
		{record("wrong", "41", "42"), false},
	} {
		o, err := p.Runner.RunTrial(t.Context(), &engine.TrialContext{RunID: "r", TrialID: "t-" + tc.rec.ID, Record: tc.rec, Emit: discard})
		if err != nil {
			t.Fatalf("%s: %v", tc.rec.ID, err)
		}
		if o.Error != "" || o.Verdict == nil || o.Verdict.Pass != tc.pass {
			t.Errorf("%s: verdict %+v error %q, want pass %v", tc.rec.ID, o.Verdict, o.Error, tc.pass)
		}
	}
}

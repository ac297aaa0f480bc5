package embedded

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/sandbox/pool"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/sandbox/pool/wire"
	"evals.si/store"
)

// A run through a sandbox pool with maxima cannot take more than the
// pool's operator allows, whatever it asks: a spec asking for cgroup off,
// or a record asking more memory than the pool's maximum, errors as
// infrastructure (the sandbox phase) with the pool's refusal naming the
// limit, and its command never runs; a record asking nothing runs under
// the pool's maxima, as its isolation report shows.
func TestPoolLimitsThroughTheEngine(t *testing.T) {
	requireAgentSandbox(t)
	run := pooltest.Start(t, pooltest.Options{Limits: pool.Limits{Max: wire.LimitValues{MemoryMB: 1024, PidsMax: 128}}})
	a := openPoolApp(t, run.Dial(t, "limits-worker"))
	marker := "EVALSI-POOL-LIMITS-RAN"
	// cgroup off is the spec's to choose (a record may not loosen it), so
	// it is a run of its own.
	runSpec := func(name string, sandbox map[string]any, records ...map[string]any) map[string]*trialView {
		sb := map[string]any{"workdir": "/workspace", "network": "deny", "ladder": []string{"bwrap"}}
		for k, v := range sandbox {
			sb[k] = v
		}
		s := map[string]any{
			"name":    name,
			"retries": 0,
			"dataset": map[string]any{"records": records},
			"target": map[string]any{"connector": "scripted", "model": "scripted-agent", "script": map[string]any{"default": []map[string]any{
				{"tool_calls": []map[string]any{{"name": "bash", "arguments": map[string]any{"command": "echo " + marker}}}},
				{"content": "done"},
			}}},
			"harness":     map[string]any{"builtin": map[string]any{"max_steps": 4}},
			"environment": map[string]any{"sandbox": sb},
		}
		b, _ := json.Marshal(s)
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		sum, err := a.Run(context.Background(), loadSpec(t, p), RunOptions{})
		if err != nil {
			t.Fatalf("running %s: %v", name, err)
		}
		return trialViews(t, a, sum)
	}
	views := runSpec("pool-limits-cgroup-off", map[string]any{"cgroup": "off"}, map[string]any{"id": "cgroup-off", "input": "run"})
	maps.Copy(views, runSpec("pool-limits", nil,
		map[string]any{"id": "huge-memory", "input": "run", "metadata": map[string]any{"environment": map[string]any{"sandbox": map[string]any{"memory_mb": 1 << 16}}}},
		map[string]any{"id": "asks-nothing", "input": "run"}))
	for id, says := range map[string][]string{
		"cgroup-off":  {"cgroup off", "memory_mb, pids_max"},
		"huge-memory": {"memory_mb 65536", "maximum of 1024", "--max-memory-mb"},
	} {
		v, ok := views[id]
		if !ok {
			t.Errorf("%s: no trial", id)
			continue
		}
		if v.trial.Status != store.TrialErrored || v.trial.ErrorKind != "sandbox" {
			t.Errorf("%s: trial %s (%s: %s); want an infrastructure error of the sandbox phase", id, v.trial.Status, v.trial.ErrorKind, v.trial.Error)
		}
		for _, w := range says {
			if !strings.Contains(v.trial.Error, w) {
				t.Errorf("%s: the trial's error %q does not say %q", id, v.trial.Error, w)
			}
		}
		if strings.Contains(v.output(), marker) {
			t.Errorf("%s: the record's command ran", id)
		}
	}
	v, ok := views["asks-nothing"]
	if !ok {
		t.Fatal("asks-nothing: no trial")
	}
	if done, why := v.finished(); !done {
		t.Fatalf("asks-nothing: %s", why)
	}
	if !strings.Contains(v.output(), marker) {
		t.Errorf("asks-nothing: the command's output %q lacks %s", v.output(), marker)
	}
	limits, notes := strings.Join(v.report.Limits, " "), strings.Join(v.report.Notes, "\n")
	for _, w := range []string{"pids.max=128", "1024MB"} {
		if !strings.Contains(limits, w) {
			t.Errorf("asks-nothing: the isolation report's limits %q do not show the pool's %s", v.report.Limits, w)
		}
	}
	if !strings.Contains(notes, "memory_mb=1024: the sandbox pool's maximum") {
		t.Errorf("asks-nothing: the isolation report's notes do not say the pool chose its memory:\n%s", notes)
	}
}

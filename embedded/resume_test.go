package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/engine"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
)

// writeResumeSpec writes a plain scripted eval of n records × 2 trials,
// its dataset a JSONL file next to the spec, and loads it.
func writeResumeSpec(t *testing.T, dir string, n int) (*spec.File, string) {
	t.Helper()
	var recs, script strings.Builder
	for i := range n {
		fmt.Fprintf(&recs, `{"id": "r%d", "input": "q%d", "expected": "%d"}`+"\n", i, i, i)
		// Trial 1 of every third record answers wrong.
		fmt.Fprintf(&script, "      r%d: [{content: \"%d\"}]\n", i, i)
		if i%3 == 0 {
			fmt.Fprintf(&script, "      r%d/1: [{content: \"wrong\"}]\n", i)
		}
	}
	data := filepath.Join(dir, "records.jsonl")
	if err := os.WriteFile(data, []byte(recs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	y := "name: resume-unit\ntrials: 2\nconcurrency: 2\ndataset:\n  path: records.jsonl\ntarget:\n  connector: scripted\n  model: m\n  script:\n    records:\n" +
		script.String() + "evaluators: [exact-match]\n"
	p := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := spec.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return f, data
}

func openApp(t *testing.T) *App {
	t.Helper()
	dir := t.TempDir()
	a, err := Open(context.Background(), Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// interruptedRun runs f and cancels it once `after` trials have finished.
func interruptedRun(t *testing.T, a *App, f *spec.File, after int) *engine.Summary {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum, err := a.Run(ctx, f, RunOptions{OnProgress: func(p engine.Progress) {
		if p.Done >= after {
			cancel()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != engine.StatusInterrupted {
		t.Fatalf("status %s, want interrupted", sum.Status)
	}
	return sum
}

func TestResumeFinishesInterruptedRun(t *testing.T) {
	ctx := context.Background()
	f, _ := writeResumeSpec(t, t.TempDir(), 12)
	ref, err := openApp(t).Run(ctx, f, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}

	a := openApp(t)
	first := interruptedRun(t, a, f, 5)
	var resumedProgress []engine.Progress
	sum, err := a.Resume(ctx, first.RunID[:10], RunOptions{OnProgress: func(p engine.Progress) { resumedProgress = append(resumedProgress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.RunID != first.RunID || sum.Status != engine.StatusCompleted {
		t.Fatalf("resumed: run %s status %s", sum.RunID, sum.Status)
	}
	// Progress counts the earlier trials once and only the rest anew.
	if len(resumedProgress) == 0 || resumedProgress[0].Done <= 5 || resumedProgress[len(resumedProgress)-1].Done != 24 || len(resumedProgress) >= 24 {
		t.Errorf("resumed progress: %d updates, first done %d", len(resumedProgress), resumedProgress[0].Done)
	}
	if fmt.Sprint(sum.Scores) != fmt.Sprint(ref.Scores) || !reflect.DeepEqual(sum.Aggregate, ref.Aggregate) {
		t.Errorf("resumed summary %v %+v\nuninterrupted %v %+v", sum.Scores, sum.Aggregate, ref.Scores, ref.Aggregate)
	}
	run, err := a.Store().GetRun(ctx, sum.RunID)
	if err != nil || run.Status != store.RunCompleted {
		t.Fatalf("stored run %+v, %v", run, err)
	}
	trials, _ := a.Store().ListTrials(ctx, sum.RunID)
	if len(trials) != 24 {
		t.Fatalf("%d trials stored, want 24", len(trials))
	}

	_, err = a.Resume(ctx, sum.RunID, RunOptions{})
	var re ResumeError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "already completed") {
		t.Errorf("resuming a completed run: %v", err)
	}
	_, err = a.Resume(ctx, "r-nope", RunOptions{})
	if !errors.As(err, &re) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("resuming an unknown run: %v", err)
	}
}

func TestResumeRefusesChangedDataset(t *testing.T) {
	ctx := context.Background()
	f, data := writeResumeSpec(t, t.TempDir(), 6)
	a := openApp(t)
	first := interruptedRun(t, a, f, 3)
	orig, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"record changed", strings.Replace(string(orig), `"q0"`, `"q0 changed"`, 1), `record "r0" changed`},
		{"record gone", strings.SplitN(string(orig), "\n", 2)[1], `no longer has record "r0"`},
	} {
		if err := os.WriteFile(data, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := a.Resume(ctx, first.RunID, RunOptions{})
		var re ResumeError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a ResumeError saying %q", tc.name, err, tc.want)
		}
	}
	if err := os.WriteFile(data, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := a.Resume(ctx, first.RunID, RunOptions{})
	if err != nil || sum.Status != engine.StatusCompleted || sum.Aggregate.TrialsRun != 12 {
		t.Fatalf("resume with the original dataset: %+v, %v", sum, err)
	}
}

// A provider that answers 429 once per request: every trial still
// completes (the SDK retries), and the live progress shows the provider's
// limiter seeing the rate limits.
func TestProviderRateLimitsShowInProgress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4", Status: 429}}}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var recs strings.Builder
	for i := range 6 {
		fmt.Fprintf(&recs, "    - {id: q%d, input: \"2+2? (%d)\", expected: \"4\"}\n", i, i)
	}
	f, err := spec.Parse("limits.yaml", []byte("concurrency: 3\ndataset:\n  records:\n"+recs.String()+
		"target:\n  connector: openai\n  model: m\n  base_url: http://"+addr.String()+"/v1\n  api_key_env: EVALSI_LIMITS_TEST_KEY\nevaluators: [exact-match]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := Open(ctx, Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"),
		Getenv: func(k string) string {
			if k == "EVALSI_LIMITS_TEST_KEY" {
				return "not-secret"
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var last engine.Progress
	sum, err := a.Run(ctx, f, RunOptions{OnProgress: func(p engine.Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 0 || sum.Scores["exact-match"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	if len(last.Providers) != 1 {
		t.Fatalf("progress providers = %+v, want the openai provider", last.Providers)
	}
	p := last.Providers[0]
	if p.Limited == 0 || p.Requests < 2*p.Limited || !strings.Contains(p.Name, "openai") {
		t.Errorf("provider state %+v: want the 429s counted", p)
	}
}

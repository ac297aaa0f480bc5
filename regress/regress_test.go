package regress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"evals.si/dataset"
	"evals.si/embedded"
	"evals.si/regress"
	"evals.si/spec"
	"evals.si/store"
)

// finishedRun runs testdata/capitals.yaml (scripted answers: france and
// japan right, peru half right, kenya wrong, chad errored) with the given
// number of trials in a fresh SQLite store and returns the store and run.
func finishedRun(t *testing.T, trials int) (*store.Store, string) {
	t.Helper()
	app, runID := finishedRunApp(t, trials)
	return app.Store(), runID
}

func finishedRunApp(t *testing.T, trials int) (*embedded.App, string) {
	t.Helper()
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{
		StorePath: filepath.Join(t.TempDir(), "evalsi.db"),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	f, err := spec.Load("testdata/capitals.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f.Spec.Trials = trials
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != trials {
		t.Fatalf("run %s: %d errored trials, want %d (chad's)", sum.RunID, sum.Errored, trials)
	}
	return app, sum.RunID
}

func sourceRun(t *testing.T, r spec.Record) regress.SourceRun {
	t.Helper()
	var s regress.SourceRun
	if err := json.Unmarshal(r.Metadata[regress.SourceRunKey], &s); err != nil {
		t.Fatalf("record %s: metadata.source_run: %v", r.ID, err)
	}
	return s
}

func TestRunSource(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 2)
	var logs bytes.Buffer
	src := regress.NewRunSource(st, slog.New(slog.NewTextHandler(&logs, nil)))

	// Through the registry, as a spec's dataset: {run} is loaded.
	reg := dataset.NewRegistry()
	reg.ServeRuns(src)
	recs, err := reg.Load(ctx, &spec.File{Spec: &spec.Spec{Dataset: spec.Dataset{Run: &spec.RunDataset{RunID: runID[:len(runID)-2]}}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	// chad errored: skipped, and said so.
	slices.Sort(ids)
	if got := strings.Join(ids, ","); got != "france,japan,kenya,peru" {
		t.Fatalf("records %s, want the 4 finished ones", got)
	}
	if !strings.Contains(logs.String(), "skipped_errored=1") || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("log: %s", logs.String())
	}
	for _, r := range recs {
		s := sourceRun(t, r)
		if s.RunID != runID || s.RecordID != r.ID || s.Trial != 0 || s.TrialID == "" {
			t.Errorf("record %s: source_run %+v", r.ID, s)
		}
		if r.ID == "kenya" && (s.Output != "Mombasa" || s.Scores["includes"] != 0 || s.Scores["exact-match"] != 0 || r.Input.Text == "" || string(r.Expected) != `"Nairobi"`) {
			t.Errorf("kenya: %+v, source_run %+v", r, s)
		}
		if r.ID == "peru" && (string(r.Metadata["region"]) != `"americas"` || s.Scores["includes"] != 1) {
			t.Errorf("peru keeps its own metadata: %v, source_run %+v", r.Metadata, s)
		}
	}

	one := 1
	recs, err = src.RunRecords(ctx, spec.RunDataset{RunID: runID, Trial: &one})
	if err != nil || len(recs) != 4 || sourceRun(t, recs[0]).Trial != 1 || recs[0].ID != sourceRun(t, recs[0]).RecordID {
		t.Errorf("trial 1: %v, %d records", err, len(recs))
	}
	recs, err = src.RunRecords(ctx, spec.RunDataset{RunID: runID, AllTrials: true})
	if err != nil || len(recs) != 8 {
		t.Fatalf("all_trials: %v, %d records, want 8", err, len(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		s := sourceRun(t, r)
		if want := fmt.Sprintf("%s#%d", s.RecordID, s.Trial); r.ID != want {
			t.Errorf("all_trials id %s, want %s", r.ID, want)
		}
		seen[r.ID] = true
	}
	if !seen["kenya#0"] || !seen["kenya#1"] || seen["chad#0"] {
		t.Errorf("all_trials ids: %v", seen)
	}

	three := 3
	if _, err := src.RunRecords(ctx, spec.RunDataset{RunID: runID, Trial: &three}); err == nil || !strings.Contains(err.Error(), "no trial 3") {
		t.Errorf("trial 3 of a 2-trial run: %v", err)
	}
	if _, err := src.RunRecords(ctx, spec.RunDataset{RunID: "r-nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing run: %v", err)
	}
}

// TestRunSourceWithoutStoredRecords: a run whose trials do not carry their
// record (recorded before records were stored) is an error naming the run.
func TestRunSourceWithoutStoredRecords(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	run, err := st.CreateRun(ctx, store.RunInput{Spec: &spec.Spec{Name: "old"}})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := st.StartTrial(ctx, store.TrialInput{RunID: run.ID, RecordID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FinishTrial(ctx, tr.ID, store.TrialResult{Status: store.TrialFinished, Output: "x"}); err != nil {
		t.Fatal(err)
	}
	_, err = regress.NewRunSource(st, nil).RunRecords(ctx, spec.RunDataset{RunID: run.ID})
	if err == nil || !strings.Contains(err.Error(), run.ID) || !strings.Contains(err.Error(), "no stored record") {
		t.Errorf("RunRecords of a run without stored records: %v", err)
	}
	_, _, err = regress.Promote(ctx, st, run.ID, regress.Options{Dataset: "d", When: "true", Project: regress.LocalProject, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), run.ID) {
		t.Errorf("Promote of a run without stored records: %v", err)
	}
}

// TestShadowSpec: a shadow replay runs every record the baseline ran (the
// errored one too) under the same ids, scored by the baseline's evaluators.
func TestShadowSpec(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	cand := &spec.Spec{
		Name:       "candidate",
		Dataset:    spec.Dataset{Run: &spec.RunDataset{RunID: runID[:len(runID)-3]}},
		Evaluators: []spec.Evaluator{{Name: "regex"}},
	}
	id, err := regress.BaselineOf(cand, "")
	if err != nil {
		t.Fatal(err)
	}
	base, err := regress.Shadow(ctx, st, cand, id)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range cand.Dataset.Records {
		ids = append(ids, r.ID)
		if _, ok := r.Metadata[regress.SourceRunKey]; ok {
			t.Errorf("record %s: a shadow replay's inputs carry no source_run", r.ID)
		}
	}
	slices.Sort(ids)
	if base.ID != runID || cand.Dataset.Run != nil || strings.Join(ids, ",") != "chad,france,japan,kenya,peru" {
		t.Errorf("shadow dataset: base %s, run %v, records %v", base.ID, cand.Dataset.Run, ids)
	}
	if len(cand.Evaluators) != 2 || cand.Evaluators[0].Name != "exact-match" || cand.Evaluators[1].Name != "includes" {
		t.Errorf("shadow evaluators %+v, want the baseline's", cand.Evaluators)
	}
	if _, err := regress.BaselineOf(&spec.Spec{}, ""); !errors.Is(err, regress.ErrNoBaseline) {
		t.Errorf("no baseline: %v", err)
	}
}

// TestRunSourceInARun runs a spec whose dataset is dataset: {run} of
// another run, as embedded mode serves it: the finished records, re-scored.
func TestRunSourceInARun(t *testing.T) {
	ctx := context.Background()
	app, runID := finishedRunApp(t, 1)
	f, err := spec.Parse("rescore.yaml", []byte(`
dataset: {run: {run_id: `+runID+`}}
target:
  connector: scripted
  model: echo
  script: {default: [{content: "Paris"}]}
evaluators: [exact-match]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// france, japan, peru and kenya (chad errored in the source run).
	if sum.Records != 4 || sum.Errored != 0 || sum.Scores["exact-match"] != 0.25 {
		t.Errorf("run over dataset: {run}: records %d errored %d scores %v", sum.Records, sum.Errored, sum.Scores)
	}
}

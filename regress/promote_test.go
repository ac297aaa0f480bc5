package regress_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"evals.si/dataset"
	"evals.si/regress"
	"evals.si/spec"
	"evals.si/trajectory"
)

func promotedFrom(t *testing.T, r spec.Record) regress.PromotedFrom {
	t.Helper()
	var p regress.PromotedFrom
	if err := json.Unmarshal(r.Metadata[regress.PromotedFromKey], &p); err != nil {
		t.Fatalf("record %s: metadata.promoted_from: %v", r.ID, err)
	}
	return p
}

func TestPromote(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 2)
	dir := t.TempDir()
	opts := regress.Options{Dataset: "capital-fails", When: `!errored && scores["exact-match"] < 1`, Project: regress.LocalProject, Dir: dir}
	path, err := regress.DatasetPath(dir, regress.LocalProject, "capital-fails")
	if err != nil || path != filepath.Join(dir, "promoted", "local", "capital-fails.jsonl") {
		t.Fatalf("DatasetPath = %s, %v", path, err)
	}

	// The failed records, peru and kenya, once each though both of their
	// trials failed; by a prefix of the run id.
	added, skipped, err := regress.Promote(ctx, st, runID[:len(runID)-1], opts)
	if err != nil || added != 2 || skipped != 0 {
		t.Fatalf("Promote = %d, %d, %v; want 2 added", added, skipped, err)
	}
	recs, err := dataset.ReadFile(path)
	if err != nil {
		t.Fatalf("the promoted file is not a dataset: %v", err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
		p := promotedFrom(t, r)
		if p.RunID != runID || runID+"/"+p.RecordID != r.ID || p.Trial != 0 || p.TrialID == "" || p.Output != nil || p.Events != nil || p.Scores != nil {
			t.Errorf("record %s: promoted_from %+v", r.ID, p)
		}
		if r.Input.Text == "" || len(r.Expected) == 0 {
			t.Errorf("record %s lost its input or expected: %+v", r.ID, r)
		}
	}
	slices.Sort(ids)
	if want := []string{runID + "/kenya", runID + "/peru"}; !slices.Equal(ids, want) {
		t.Errorf("promoted %v, want %v", ids, want)
	}
	before, _ := os.ReadFile(path)

	// Again, and twice at once: nothing added, the file unchanged.
	var wg sync.WaitGroup
	results := make([][2]int, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, s, err := regress.Promote(ctx, st, runID, opts)
			results[i], errs[i] = [2]int{a, s}, err
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || results[i] != [2]int{0, 2} {
			t.Errorf("promote again: %v, %v; want 0 added, 2 skipped", results[i], errs[i])
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("promoting again changed the file:\n%s\n---\n%s", before, after)
	}

	// Concurrent promotes into a new dataset add each record once.
	opts.Dataset = "at-once"
	var total int
	var mu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, _, err := regress.Promote(ctx, st, runID, opts)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += a
			mu.Unlock()
		}()
	}
	wg.Wait()
	p2, _ := regress.DatasetPath(dir, regress.LocalProject, "at-once")
	if recs, err := dataset.ReadFile(p2); err != nil || len(recs) != 2 || total != 2 {
		t.Errorf("concurrent promotes: added %d in all, file has %d records (%v)", total, len(recs), err)
	}

	// The errored trial, selected by errored.
	opts.Dataset, opts.When = "errors", "errored"
	if added, _, err := regress.Promote(ctx, st, runID, opts); err != nil || added != 1 {
		t.Errorf("promote errored: %d, %v", added, err)
	}
	p3, _ := regress.DatasetPath(dir, regress.LocalProject, "errors")
	if recs, err := dataset.ReadFile(p3); err != nil || len(recs) != 1 || recs[0].ID != runID+"/chad" || !promotedFrom(t, recs[0]).Errored {
		t.Errorf("errored record: %+v, %v", recs, err)
	}

	// trial and record in the condition; a later trial is the one kept.
	opts.Dataset, opts.When = "americas", `trial == 1 && record.metadata.region == "americas" && record.id == "peru" && record.expected == "Lima"`
	if added, _, err := regress.Promote(ctx, st, runID, opts); err != nil || added != 1 {
		t.Errorf("promote by record: %d, %v", added, err)
	}
	p4, _ := regress.DatasetPath(dir, regress.LocalProject, "americas")
	if recs, err := dataset.ReadFile(p4); err != nil || len(recs) != 1 || promotedFrom(t, recs[0]).Trial != 1 ||
		string(recs[0].Metadata["region"]) != `"americas"` {
		t.Errorf("by record: %+v, %v", recs, err)
	}
}

func TestPromoteIncludeOutputs(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	dir := t.TempDir()
	opts := regress.Options{Dataset: "kenya", When: `scores["includes"] == 0.0 && !errored`, IncludeOutputs: true, Project: "team-a", Dir: dir}
	if added, _, err := regress.Promote(ctx, st, runID, opts); err != nil || added != 1 {
		t.Fatalf("Promote = %d, %v", added, err)
	}
	path, _ := regress.DatasetPath(dir, "team-a", "kenya")
	recs, err := dataset.ReadFile(path)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	p := promotedFrom(t, recs[0])
	if p.Output == nil || *p.Output != "Mombasa" || p.Scores["includes"] != 0 || p.Scores["exact-match"] != 0 {
		t.Errorf("promoted_from without the output or scores: %+v", p)
	}
	if len(p.Events) == 0 || !slices.ContainsFunc(p.Events, func(e trajectory.Event) bool { b, _ := json.Marshal(e); return strings.Contains(string(b), "Mombasa") }) {
		t.Errorf("promoted_from.events lacks the trajectory: %d events", len(p.Events))
	}
}

func TestPromoteBadCondition(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	dir := t.TempDir()
	for _, c := range []struct{ when, want string }{
		{`scores["exact-match"] <`, "at 1:24: Syntax error"},
		{`scores["exact-match"] == 1`, "write 1.0"},
		{`score["exact-match"] < 1`, "undeclared reference to 'score'"},
		{`scores["exact-match"] + 1.0`, "must give a bool"},
		{`errored == "yes"`, "no matching overload"},
		{"", "required"},
		{strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), "--when"},
		{strings.Repeat("true && ", 1000) + "true", "--when"},
	} {
		_, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: "d", When: c.when, Project: regress.LocalProject, Dir: dir})
		var ie *regress.InvalidOptionError
		if !errors.As(err, &ie) || ie.Option != "when" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("when %.40q: %v, want an invalid --when containing %q", c.when, err, c.want)
		}
	}
	for _, name := range []string{"../escape", "a/b", ".hidden", "", "a\x00b"} {
		_, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: name, When: "true", Project: regress.LocalProject, Dir: dir})
		var ie *regress.InvalidOptionError
		if !errors.As(err, &ie) || ie.Option != "dataset" {
			t.Errorf("dataset %q: %v", name, err)
		}
	}
	if _, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: "d", When: "true", Project: "..", Dir: dir}); err == nil {
		t.Errorf("project ..: no error")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("bad options wrote into the datasets directory: %v", ents)
	}
}

// TestPromoteRuntimeError: a condition that fails on some trial names the
// record and writes nothing, also when other trials matched first.
func TestPromoteRuntimeError(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	dir := t.TempDir()
	for _, c := range []struct{ when, want string }{
		// chad errored and has no scores.
		{`scores["exact-match"] < 1`, "record chad trial 0"},
		{`scores["no-such-score"] < 1`, "no such key"},
		{`record.metadata.region == "americas"`, "no such key"},
		// About 10^6 steps: over the cost limit.
		{`[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, [0,1,2,3,4,5,6,7,8,9].all(c, [0,1,2,3,4,5,6,7,8,9].all(d, [0,1,2,3,4,5,6,7,8,9].all(e, [0,1,2,3,4,5,6,7,8,9].all(f, a+b+c+d+e+f >= 0))))))`, "cost limit"},
	} {
		_, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: "d", When: c.when, Project: regress.LocalProject, Dir: dir})
		var ee *regress.EvalError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("when %.60q: %v, want an evaluation error containing %q", c.when, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed condition wrote into the datasets directory: %v", ents)
	}
}

// TestPromoteRefusesSymlinks: the dataset file, and the directories to it,
// are never followed out of the datasets directory.
func TestPromoteRefusesSymlinks(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	outside := filepath.Join(t.TempDir(), "outside.jsonl")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "promoted", "local"), 0o755)
	os.Symlink(outside, filepath.Join(dir, "promoted", "local", "d.jsonl"))
	os.Symlink(filepath.Dir(outside), filepath.Join(dir, "promoted", "evil"))
	for _, project := range []string{"local", "evil"} {
		name := "d"
		if project == "evil" {
			name = "outside"
		}
		_, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: name, When: "true", Project: project, Dir: dir})
		if err == nil {
			t.Errorf("project %s: promoted through a symlink", project)
		}
	}
	if b, _ := os.ReadFile(outside); len(b) != 0 {
		t.Errorf("wrote through a symlink: %s", b)
	}
	// A file that is not a dataset is not appended to.
	os.WriteFile(filepath.Join(dir, "promoted", "local", "bad.jsonl"), []byte("not json\n"), 0o644)
	if _, _, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: "bad", When: "true", Project: "local", Dir: dir}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("appending to a file that is not a dataset: %v", err)
	}
}

// TestPromoteAfterTornAppend: a promote that died mid-line leaves a torn
// last line; the next promote drops it and appends whole records.
func TestPromoteAfterTornAppend(t *testing.T) {
	ctx := context.Background()
	st, runID := finishedRun(t, 1)
	dir := t.TempDir()
	opts := regress.Options{Dataset: "d", When: `!errored && scores["exact-match"] < 1`, Project: regress.LocalProject, Dir: dir}
	if added, _, err := regress.Promote(ctx, st, runID, opts); err != nil || added != 2 {
		t.Fatalf("Promote = %d, %v", added, err)
	}
	path, _ := regress.DatasetPath(dir, regress.LocalProject, "d")
	whole, _ := os.ReadFile(path)
	first, _, _ := strings.Cut(string(whole), "\n")
	// Keep the first record and half of the second.
	if err := os.WriteFile(path, whole[:len(first)+1+(len(whole)-len(first)-1)/2], 0o640); err != nil {
		t.Fatal(err)
	}
	if added, skipped, err := regress.Promote(ctx, st, runID, opts); err != nil || added != 1 || skipped != 1 {
		t.Fatalf("Promote after a torn append = %d, %d, %v; want 1 added, 1 skipped", added, skipped, err)
	}
	if recs, err := dataset.ReadFile(path); err != nil || len(recs) != 2 {
		t.Errorf("after repair: %d records, %v", len(recs), err)
	}
}

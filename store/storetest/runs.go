package storetest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// runsCreate: generated ids are sortable and unique; explicit ids are
// kept, refused when taken or malformed; the server's fields round-trip;
// times are UTC.
func runsCreate(t *testing.T, s *suite) {
	ctx := t.Context()
	re := regexp.MustCompile(`^r-\d{8}-\d{6}-[0-9a-f]{6}$`)
	seen := map[string]bool{}
	for range 20 {
		r, err := s.b.CreateRun(ctx, store.RunInput{Name: "n"})
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(r.ID) {
			t.Errorf("generated id %q does not match %s", r.ID, re)
		}
		if seen[r.ID] {
			t.Errorf("duplicate id %s", r.ID)
		}
		seen[r.ID] = true
		if r.Status != store.RunRunning || r.CreatedAt.IsZero() || !r.FinishedAt.IsZero() || isUTC(r.CreatedAt) != nil {
			t.Errorf("new run = %+v", r)
		}
	}
	in := store.RunInput{ID: "fixed", Spec: &spec.Spec{Name: "from-spec"}, SpecPath: "/x/spec.yaml",
		Project: "team-a", MaxRunning: 3, DatasetVersion: "sha256:abc"}
	created, err := s.b.CreateRun(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.b.GetRun(ctx, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "fixed" || got.Name != "from-spec" || got.SpecPath != "/x/spec.yaml" || got.Project != "team-a" ||
		got.MaxRunning != 3 || got.DatasetVersion != "sha256:abc" || got.Status != store.RunRunning {
		t.Errorf("run read back = %+v", got)
	}
	if !got.CreatedAt.Equal(created.CreatedAt) || isUTC(got.CreatedAt) != nil {
		t.Errorf("created at: returned %s, read back %s", created.CreatedAt, got.CreatedAt)
	}
	if d := time.Since(got.CreatedAt); d < 0 || d > time.Hour {
		t.Errorf("created at %s is not about now", got.CreatedAt)
	}
	gs, err := got.DecodeSpec()
	if err != nil || gs.Name != "from-spec" {
		t.Errorf("DecodeSpec = %+v, %v", gs, err)
	}
	if _, err := s.b.CreateRun(ctx, store.RunInput{ID: "fixed"}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("duplicate explicit id: err = %v, want already exists", err)
	}
	for _, bad := range []string{"-lead", "has space", "a/b", "ünï", "nul\x00", strings.Repeat("a", 129)} {
		if _, err := s.b.CreateRun(ctx, store.RunInput{ID: bad}); err == nil {
			t.Errorf("CreateRun(ID %q) succeeded, want an error", bad)
		}
	}
	if _, err := s.b.CreateRun(ctx, store.RunInput{MaxRunning: -1}); err == nil {
		t.Error("CreateRun with a negative MaxRunning succeeded")
	}
}

// runsGetByPrefix: an exact id wins, a unique prefix resolves, several
// matches are ErrAmbiguous naming them, LIKE/GLOB metacharacters are plain.
func runsGetByPrefix(t *testing.T, s *suite) {
	ctx := t.Context()
	for _, id := range []string{"r-20261129-085301-ab12cd", "r-20261129-085301-ab99ee", "r-20261130-000000-000000", "r-2026", "r_x"} {
		if _, err := s.b.CreateRun(ctx, store.RunInput{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		prefix  string
		want    string
		wantErr error
	}{
		{prefix: "r-20261129-085301-ab12cd", want: "r-20261129-085301-ab12cd"},
		{prefix: "r-20261129-085301-ab1", want: "r-20261129-085301-ab12cd"},
		{prefix: "r-20261130", want: "r-20261130-000000-000000"},
		{prefix: "r-2026", want: "r-2026"},
		{prefix: "r-20261129-085301-ab", wantErr: store.ErrAmbiguous},
		{prefix: "r-202611", wantErr: store.ErrAmbiguous},
		{prefix: "r-2027", wantErr: store.ErrNotFound},
		{prefix: "x", wantErr: store.ErrNotFound},
		{prefix: "r-%", wantErr: store.ErrNotFound},
		{prefix: "r-*", wantErr: store.ErrNotFound},
		{prefix: "r-_", wantErr: store.ErrNotFound},
		{prefix: "r_", want: "r_x"},
		{prefix: "r-\x00", wantErr: store.ErrNotFound},
		{prefix: "r-\xff", wantErr: store.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			r, err := s.b.GetRun(ctx, tt.prefix)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("GetRun(%q) err = %v, want %v", tt.prefix, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.ID != tt.want {
				t.Errorf("GetRun(%q) = %s, want %s", tt.prefix, r.ID, tt.want)
			}
		})
	}
	if _, err := s.b.GetRun(ctx, ""); err == nil {
		t.Error(`GetRun("") succeeded, want an error`)
	}
	_, err := s.b.GetRun(ctx, "r-20261129-085301-ab")
	if err == nil || !strings.Contains(err.Error(), "r-20261129-085301-ab12cd") || !strings.Contains(err.Error(), "r-20261129-085301-ab99ee") {
		t.Errorf("ambiguous error should list the candidates: %v", err)
	}
}

// runsList: newest first, limit and paging with Before, filters by status,
// name and project.
func runsList(t *testing.T, s *suite) {
	ctx := t.Context()
	var created []string // oldest first
	for i := range 7 {
		name, project := "even", "p-even"
		if i%2 == 1 {
			name, project = "odd", "p-odd"
		}
		r, err := s.b.CreateRun(ctx, store.RunInput{Name: name, Project: project})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, r.ID)
		// Distinct creation times, whatever the backend's clock resolution.
		time.Sleep(2 * time.Millisecond)
	}
	s.must("FinishRun", s.b.FinishRun(ctx, created[2], store.RunFailed, nil, "boom"))
	newestFirst := slices.Clone(created)
	slices.Reverse(newestFirst)
	tests := []struct {
		name string
		opt  store.ListRunsOptions
		want []string
	}{
		{"all newest first", store.ListRunsOptions{}, newestFirst},
		{"limit", store.ListRunsOptions{Limit: 3}, newestFirst[:3]},
		{"page after", store.ListRunsOptions{Limit: 3, Before: newestFirst[2]}, newestFirst[3:6]},
		{"last page", store.ListRunsOptions{Before: newestFirst[5]}, newestFirst[6:]},
		{"status", store.ListRunsOptions{Status: store.RunFailed}, []string{created[2]}},
		{"name", store.ListRunsOptions{Name: "odd"}, []string{created[5], created[3], created[1]}},
		{"project", store.ListRunsOptions{Project: "p-odd", Limit: 2}, []string{created[5], created[3]}},
		{"project unknown", store.ListRunsOptions{Project: "nope"}, nil},
		{"name and status", store.ListRunsOptions{Name: "odd", Status: store.RunFailed}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := s.b.ListRuns(ctx, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(rs); !slices.Equal(got, tt.want) {
				t.Errorf("ListRuns(%+v) = %v, want %v", tt.opt, got, tt.want)
			}
		})
	}
	if _, err := s.b.ListRuns(ctx, store.ListRunsOptions{Status: "bogus"}); err == nil {
		t.Error("ListRuns with an unknown status succeeded")
	}
	if _, err := s.b.ListRuns(ctx, store.ListRunsOptions{Before: "r-nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ListRuns before a missing run: err = %v, want ErrNotFound", err)
	}
}

// runsFinishAndResume: bad statuses and summaries are refused; a finished
// run keeps its error and summary; resume (by prefix) makes it running.
func runsFinishAndResume(t *testing.T, s *suite) {
	ctx := t.Context()
	r, err := s.b.CreateRun(ctx, store.RunInput{Name: "x", SpecPath: "/tmp/x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ status, summary string }{
		{store.RunRunning, ""},
		{"done", ""},
		{store.RunCompleted, "{not json"},
	} {
		if err := s.b.FinishRun(ctx, r.ID, tt.status, []byte(tt.summary), ""); err == nil {
			t.Errorf("FinishRun(status %q, summary %q) succeeded, want an error", tt.status, tt.summary)
		}
	}
	s.must("FinishRun", s.b.FinishRun(ctx, r.ID, store.RunInterrupted, nil, "canceled by user"))
	got, err := s.b.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.RunInterrupted || got.Error != "canceled by user" || got.FinishedAt.IsZero() ||
		got.Summary != nil || got.SpecPath != "/tmp/x.yaml" || isUTC(got.FinishedAt) != nil {
		t.Errorf("finished run = %+v", got)
	}
	res, err := s.b.ResumeRun(ctx, r.ID[:len(r.ID)-2])
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != store.RunRunning || res.Error != "" || !res.FinishedAt.IsZero() {
		t.Errorf("resumed run = %+v", res)
	}
	// Finishing again overwrites; the summary is kept as written.
	sum := `{"task-success": 1, "a":[1,2]}`
	s.must("FinishRun", s.b.FinishRun(ctx, r.ID, store.RunCompleted, []byte(sum), ""))
	if got, err := s.b.GetRun(ctx, r.ID); err != nil || got.Status != store.RunCompleted || string(got.Summary) != sum {
		t.Errorf("run finished again = %+v, %v; want completed with summary %s", got, err, sum)
	}
}

// notFound: every call naming a run, attempt or blob that does not exist
// is ErrNotFound, and changes nothing.
func notFound(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	missing := "sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name string
		call func() error
	}{
		{"GetRun", func() error { _, err := s.b.GetRun(ctx, "r-nope"); return err }},
		{"FinishRun", func() error { return s.b.FinishRun(ctx, "r-nope", store.RunFailed, nil, "x") }},
		{"ResumeRun", func() error { _, err := s.b.ResumeRun(ctx, "r-nope"); return err }},
		{"Enqueue", func() error { return s.b.Enqueue(ctx, "r-nope", []store.TrialInput{{RecordID: "a"}}) }},
		{"ListTrials", func() error { _, err := s.b.ListTrials(ctx, "r-nope"); return err }},
		{"ListAttempts", func() error { _, err := s.b.ListAttempts(ctx, "r-nope"); return err }},
		{"CountTrials", func() error { _, err := s.b.CountTrials(ctx, "r-nope"); return err }},
		{"GetTrial", func() error { _, err := s.b.GetTrial(ctx, "t-nope"); return err }},
		{"AppendEvent", func() error { return s.b.AppendEvent(ctx, "t-nope", logEv("x")) }},
		{"AppendEvents", func() error { return s.b.AppendEvents(ctx, "t-nope", []trajectory.Event{logEv("x")}) }},
		{"PutScores", func() error { return s.b.PutScores(ctx, "t-nope", []store.Score{{Name: "a", Value: 1}}) }},
		{"PutEvaluations", func() error { return s.b.PutEvaluations(ctx, "t-nope", []byte(`[]`)) }},
		{"PutArtifact", func() error {
			_, err := s.b.PutArtifact(ctx, "t-nope", "diff", "text/x-diff", strings.NewReader("d"))
			return err
		}},
		{"GetBlob", func() error { _, err := s.b.GetBlob(ctx, missing); return err }},
		{"OpenBlob", func() error { _, err := s.b.OpenBlob(ctx, missing); return err }},
		{"BlobSize", func() error { _, err := s.b.BlobSize(ctx, missing); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	}
	if n, err := s.b.CountEvents(ctx, l.TrialID); err != nil || n != 0 {
		t.Errorf("CountEvents = %d, %v", n, err)
	}
	if n, err := s.b.CountEvents(ctx, "t-nope"); err != nil || n != 0 {
		t.Errorf("CountEvents of a missing attempt = %d, %v; want 0, nil", n, err)
	}
	if es, err := s.b.Events(ctx, "t-nope", 0, 0); err != nil || len(es) != 0 {
		t.Errorf("Events of a missing attempt = %v, %v; want none, nil", es, err)
	}
}

// enqueueMany: thousands of trials enqueued at once (in one second: their
// random id parts collide) are all registered, in the order given.
func enqueueMany(t *testing.T, s *suite) {
	ctx := t.Context()
	const n = 5000
	r, err := s.b.CreateRun(ctx, store.RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	ins := make([]store.TrialInput, n)
	for i := range ins {
		ins[i] = store.TrialInput{RecordID: fmt.Sprintf("rec-%05d", n-i), Trial: i % 3}
	}
	s.must("Enqueue", s.b.Enqueue(ctx, r.ID, ins))
	s.must("Enqueue again", s.b.Enqueue(ctx, r.ID, ins[:10]))
	ts, err := s.b.ListTrials(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != n {
		t.Fatalf("%d trials registered, want %d", len(ts), n)
	}
	seen := map[string]bool{}
	for i, tr := range ts {
		if tr.RecordID != ins[i].RecordID || tr.Trial != ins[i].Trial || tr.Status != store.TrialPending || seen[tr.ID] {
			t.Fatalf("trial %d = %s/%d %s (id %s), want %s/%d pending, ids distinct", i, tr.RecordID, tr.Trial, tr.Status, tr.ID, ins[i].RecordID, ins[i].Trial)
		}
		seen[tr.ID] = true
	}
}

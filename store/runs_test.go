package store

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestCreateRunGeneratesSortableIDs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	re := regexp.MustCompile(`^r-\d{8}-\d{6}-[0-9a-f]{6}$`)
	seen := map[string]bool{}
	for range 20 {
		r, err := s.CreateRun(ctx, RunInput{Name: "n"})
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
		if r.Status != RunRunning || r.CreatedAt.IsZero() || !r.FinishedAt.IsZero() {
			t.Errorf("new run = %+v", r)
		}
	}
	if _, err := s.CreateRun(ctx, RunInput{ID: "fixed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, RunInput{ID: "fixed"}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("duplicate explicit id: err = %v, want already exists", err)
	}
	for _, bad := range []string{"-lead", "has space", "a/b", "ünï", strings.Repeat("a", 129)} {
		if _, err := s.CreateRun(ctx, RunInput{ID: bad}); err == nil {
			t.Errorf("CreateRun(ID %q) succeeded, want an error", bad)
		}
	}
}

func TestGetRunByPrefix(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	for _, id := range []string{"r-20261129-085301-ab12cd", "r-20261129-085301-ab99ee", "r-20261130-000000-000000", "r-2026"} {
		if _, err := s.CreateRun(ctx, RunInput{ID: id}); err != nil {
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
		// An exact id wins even though it prefixes others.
		{prefix: "r-2026", want: "r-2026"},
		{prefix: "r-20261129-085301-ab", wantErr: ErrAmbiguous},
		{prefix: "r-202611", wantErr: ErrAmbiguous},
		{prefix: "r-2027", wantErr: ErrNotFound},
		{prefix: "x", wantErr: ErrNotFound},
		// LIKE/GLOB metacharacters are plain characters here.
		{prefix: "r-%", wantErr: ErrNotFound},
		{prefix: "r-*", wantErr: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			r, err := s.GetRun(ctx, tt.prefix)
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
	if _, err := s.GetRun(ctx, ""); err == nil {
		t.Error("GetRun(\"\") succeeded, want an error")
	}
	_, err := s.GetRun(ctx, "r-20261129-085301-ab")
	if err == nil || !strings.Contains(err.Error(), "r-20261129-085301-ab12cd") || !strings.Contains(err.Error(), "r-20261129-085301-ab99ee") {
		t.Errorf("ambiguous error should list the candidates: %v", err)
	}
}

func TestListRunsOrderAndFilters(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	var created []string // oldest first
	for i := range 7 {
		name := "even"
		if i%2 == 1 {
			name = "odd"
		}
		r, err := s.CreateRun(ctx, RunInput{Name: name, Project: []string{"p1", "p2", "p3"}[i%3]})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, r.ID)
	}
	if err := s.FinishRun(ctx, created[2], RunFailed, nil, "boom"); err != nil {
		t.Fatal(err)
	}
	newestFirst := slices.Clone(created)
	slices.Reverse(newestFirst)

	ids := func(rs []Run) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	tests := []struct {
		name string
		opt  ListRunsOptions
		want []string
	}{
		{"all newest first", ListRunsOptions{}, newestFirst},
		{"limit", ListRunsOptions{Limit: 3}, newestFirst[:3]},
		{"page after", ListRunsOptions{Limit: 3, Before: newestFirst[2]}, newestFirst[3:6]},
		{"last page", ListRunsOptions{Before: newestFirst[5]}, newestFirst[6:]},
		{"status", ListRunsOptions{Status: RunFailed}, []string{created[2]}},
		{"name", ListRunsOptions{Name: "odd"}, []string{created[5], created[3], created[1]}},
		{"name and status", ListRunsOptions{Name: "odd", Status: RunFailed}, nil},
		{"project", ListRunsOptions{Project: "p2"}, []string{created[4], created[1]}},
		{"project and name", ListRunsOptions{Project: "p1", Name: "even"}, []string{created[6], created[0]}},
		{"unknown project", ListRunsOptions{Project: "p9"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := s.ListRuns(ctx, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(rs); !slices.Equal(got, tt.want) {
				t.Errorf("ListRuns(%+v) = %v, want %v", tt.opt, got, tt.want)
			}
		})
	}
	if _, err := s.ListRuns(ctx, ListRunsOptions{Status: "bogus"}); err == nil {
		t.Error("ListRuns with an unknown status succeeded")
	}
	if _, err := s.ListRuns(ctx, ListRunsOptions{Before: "r-nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListRuns before a missing run: err = %v, want ErrNotFound", err)
	}
}

func TestFinishAndResumeRun(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, err := s.CreateRun(ctx, RunInput{Name: "x", SpecPath: "/tmp/x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		status  string
		summary string
	}{
		{RunRunning, ""},
		{"done", ""},
		{RunCompleted, "{not json"},
	} {
		if err := s.FinishRun(ctx, r.ID, tt.status, []byte(tt.summary), ""); err == nil {
			t.Errorf("FinishRun(status %q, summary %q) succeeded, want an error", tt.status, tt.summary)
		}
	}
	if err := s.FinishRun(ctx, r.ID, RunInterrupted, nil, "canceled by user"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != RunInterrupted || got.Error != "canceled by user" || got.FinishedAt.IsZero() || got.Summary != nil || got.SpecPath != "/tmp/x.yaml" {
		t.Errorf("finished run = %+v", got)
	}
	res, err := s.ResumeRun(ctx, r.ID[:len(r.ID)-2])
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != RunRunning || res.Error != "" || !res.FinishedAt.IsZero() {
		t.Errorf("resumed run = %+v", res)
	}
}

func TestRunServerFieldsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	in := RunInput{Name: "srv", Project: "team-a", MaxRunning: 4, DatasetVersion: "sha256:abc"}
	r, err := s.CreateRun(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := s.ListRuns(ctx, ListRunsOptions{Project: "team-a"})
	if err != nil || len(listed) != 1 {
		t.Fatalf("ListRuns = %v, %v", listed, err)
	}
	for what, run := range map[string]Run{"CreateRun": r, "GetRun": got, "ListRuns": listed[0]} {
		if run.Project != in.Project || run.MaxRunning != in.MaxRunning || run.DatasetVersion != in.DatasetVersion {
			t.Errorf("%s = project %q, max running %d, dataset version %q; want %+v", what, run.Project, run.MaxRunning, run.DatasetVersion, in)
		}
	}
	if _, err := s.CreateRun(ctx, RunInput{MaxRunning: -1}); err == nil {
		t.Error("CreateRun with a negative MaxRunning succeeded")
	}
}

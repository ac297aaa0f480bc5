package storetest

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"evals.si/store"
	"evals.si/trajectory"
)

// resultsScores: scores replace by name, list by name, keep details as
// written, are keyed by attempt in Scores(run); NaN and nameless scores
// are refused whole.
func resultsScores(t *testing.T, s *suite) {
	ctx := t.Context()
	r, l := s.trial()
	other := s.leaseIn(r.ID, "rec-2")
	details := json.RawMessage(`{"reason": "ok", "marks":[1, 2]}`)
	s.must("PutScores", s.b.PutScores(ctx, l.TrialID, []store.Score{{Name: "z", Value: 0.5}, {Name: "a", Value: 1, Details: details}}))
	s.must("PutScores again", s.b.PutScores(ctx, l.TrialID, []store.Score{{Name: "z", Value: 0.25}, {Name: "m", Value: math.Inf(1)}}))
	s.must("PutScores other", s.b.PutScores(ctx, other.TrialID, []store.Score{{Name: "a", Value: -1}}))
	got, err := s.b.TrialScores(ctx, l.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Score{{Name: "a", Value: 1, Details: details}, {Name: "m", Value: math.Inf(1)}, {Name: "z", Value: 0.25}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TrialScores = %+v, want %+v", got, want)
	}
	for _, bad := range [][]store.Score{{{Name: "ok", Value: 1}, {Name: "", Value: 1}}, {{Name: "ok", Value: 1}, {Name: "nan", Value: math.NaN()}},
		{{Name: "bad-details", Value: 1, Details: json.RawMessage(`{`)}}} {
		if err := s.b.PutScores(ctx, l.TrialID, bad); err == nil {
			t.Errorf("PutScores(%+v) succeeded", bad)
		}
	}
	all, err := s.b.Scores(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || !reflect.DeepEqual(all[l.TrialID], want) || len(all[other.TrialID]) != 1 || all[other.TrialID][0].Value != -1 {
		t.Errorf("Scores(run) = %+v", all)
	}
	if got, err := s.b.TrialScores(ctx, "t-none"); err != nil || len(got) != 0 {
		t.Errorf("TrialScores of an attempt without scores = %v, %v", got, err)
	}
}

// resultsEvaluations: stored as written, replaced, keyed by attempt,
// invalid JSON refused.
func resultsEvaluations(t *testing.T, s *suite) {
	ctx := t.Context()
	r, l := s.trial()
	other := s.leaseIn(r.ID, "rec-2")
	first := json.RawMessage(`[{"evaluator":"exact-match","scores":[{"name":"exact-match","value":1}]}]`)
	second := json.RawMessage(`[{"evaluator": "exact-match", "error": "boom"}]`)
	s.must("PutEvaluations", s.b.PutEvaluations(ctx, l.TrialID, first))
	s.must("PutEvaluations replace", s.b.PutEvaluations(ctx, l.TrialID, second))
	s.must("PutEvaluations other", s.b.PutEvaluations(ctx, other.TrialID, first))
	got, err := s.b.Evaluations(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[l.TrialID]) != string(second) || string(got[other.TrialID]) != string(first) {
		t.Fatalf("Evaluations(%s) = %s", r.ID, got)
	}
	if err := s.b.PutEvaluations(ctx, l.TrialID, json.RawMessage(`{`)); err == nil {
		t.Error("invalid JSON was stored")
	}
	other2, _ := s.b.CreateRun(ctx, store.RunInput{})
	if got, err := s.b.Evaluations(ctx, other2.ID); err != nil || len(got) != 0 {
		t.Errorf("Evaluations of a run without any = %v, %v", got, err)
	}
}

// resultsArtifacts: an artifact's bytes are a blob named by their digest;
// the same name replaces; listed by name.
func resultsArtifacts(t *testing.T, s *suite) {
	ctx := t.Context()
	_, l := s.trial()
	put := func(name, media, data string) store.Artifact {
		t.Helper()
		a, err := s.b.PutArtifact(ctx, l.TrialID, name, media, strings.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if a.TrialID != l.TrialID || a.Name != name || a.Size != int64(len(data)) || a.MediaType != media || !strings.HasPrefix(a.Digest, "sha256:") {
			t.Errorf("PutArtifact = %+v", a)
		}
		return a
	}
	put("z.log", "text/plain", "log")
	put("diff", "text/x-diff", "old")
	d := put("diff", "text/x-diff", "--- a\n+++ b\n")
	as, err := s.b.Artifacts(ctx, l.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0] != d || as[1].Name != "z.log" {
		t.Fatalf("Artifacts = %+v", as)
	}
	rc, err := s.b.OpenBlob(ctx, d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, err := io.ReadAll(rc); err != nil || string(b) != "--- a\n+++ b\n" {
		t.Errorf("artifact content = %q, %v", b, err)
	}
	if _, err := s.b.PutArtifact(ctx, l.TrialID, "", "", strings.NewReader("x")); err == nil {
		t.Error("an artifact without a name was stored")
	}
	if as, err := s.b.Artifacts(ctx, "t-none"); err != nil || len(as) != 0 {
		t.Errorf("Artifacts of an attempt without any = %v, %v", as, err)
	}
}

// resultsTrialRoundTrip: a completed attempt reads back with every field
// of its result and lease, a large output through a blob, times in UTC;
// GetTrial takes a unique prefix.
func resultsTrialRoundTrip(t *testing.T, s *suite) {
	ctx := t.Context()
	r, err := s.b.CreateRun(ctx, store.RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	record := json.RawMessage(`{"id": "rec-a", "input": "fix it", "n": [1, 2]}`)
	s.must("Enqueue", s.b.Enqueue(ctx, r.ID, []store.TrialInput{{RunID: r.ID, RecordID: "rec-a", Trial: 2, Record: record}}))
	pending, err := s.b.ListTrials(ctx, r.ID)
	if err != nil || len(pending) != 1 {
		t.Fatalf("ListTrials = %+v, %v", pending, err)
	}
	p := pending[0]
	if p.Status != store.TrialPending || p.Attempt != 1 || p.RecordID != "rec-a" || p.Trial != 2 || string(p.Record) != string(record) ||
		!p.StartedAt.IsZero() || p.CreatedAt.IsZero() || p.Unfinished() == false {
		t.Errorf("pending attempt = %+v", p)
	}
	l, err := s.b.Lease(ctx, store.LeaseRequest{Worker: "worker-7", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if l.TrialID != p.ID || string(l.Record) != string(record) || l.Worker != "worker-7" || l.Epoch <= 0 {
		t.Errorf("lease = %+v", l)
	}
	running, err := s.b.GetTrial(ctx, l.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	if running.Status != store.TrialRunning || running.LeaseOwner != "worker-7" || running.LeaseEpoch != l.Epoch ||
		!running.LeaseUntil.Equal(l.Until) || running.StartedAt.IsZero() || !running.Unfinished() {
		t.Errorf("running attempt = %+v (lease %+v)", running, l)
	}
	fail := false
	big := strings.Repeat("the answer\n", store.InlineLimit/5)
	res := store.TrialResult{
		Status:       store.TrialFinished,
		Passed:       &fail,
		Output:       big,
		Isolation:    json.RawMessage(`{"rung":"bwrap","limits":["memory"]}`),
		Usage:        trajectory.Usage{InputTokens: 100, OutputTokens: 20},
		CostUSD:      0.0125,
		SpendUsage:   trajectory.Usage{InputTokens: 200, OutputTokens: 40},
		SpendCostUSD: 0.025,
	}
	s.must("Complete", s.b.Complete(ctx, l, store.Completion{Result: res}))
	done, err := s.b.GetTrial(ctx, l.TrialID[:len(l.TrialID)-1])
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != store.TrialFinished || done.Passed == nil || *done.Passed || done.Output != big || done.OutputBlob == "" ||
		done.Usage != res.Usage || done.CostUSD != res.CostUSD || string(done.Isolation) != string(res.Isolation) ||
		done.SpendUsage != res.SpendUsage || done.SpendCostUSD != res.SpendCostUSD || done.FinishedAt.IsZero() || done.Unfinished() ||
		done.ErrorKind != "" || done.Error != "" {
		t.Errorf("finished attempt = %+v", done)
	}
	if err := isUTC(done.CreatedAt, done.StartedAt, done.FinishedAt, done.LeaseUntil); err != nil {
		t.Error(err)
	}
	if done.FinishedAt.Before(done.StartedAt) || done.StartedAt.Before(done.CreatedAt) {
		t.Errorf("times out of order: created %s, started %s, finished %s", done.CreatedAt, done.StartedAt, done.FinishedAt)
	}
	if n, err := s.b.CountTrials(ctx, r.ID); err != nil || !reflect.DeepEqual(n, map[string]int{store.TrialFinished: 1}) {
		t.Errorf("CountTrials = %v, %v", n, err)
	}
	if _, err := s.b.GetTrial(ctx, "t-x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTrial(t-x) err = %v, want ErrNotFound", err)
	}
}

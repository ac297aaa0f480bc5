package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/trajectory"
)

func TestTrialLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, err := s.CreateRun(ctx, RunInput{Name: "life"})
	if err != nil {
		t.Fatal(err)
	}
	in := TrialInput{RunID: r.ID, RecordID: "rec-a", Trial: 1, Record: json.RawMessage(`{"id":"rec-a","input":"fix it"}`)}

	pending, err := s.UpsertTrial(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if pending.Status != TrialPending || pending.Attempt != 1 || !pending.StartedAt.IsZero() || string(pending.Record) != string(in.Record) {
		t.Fatalf("UpsertTrial = %+v", pending)
	}
	again, err := s.UpsertTrial(ctx, in)
	if err != nil || again.ID != pending.ID {
		t.Fatalf("second UpsertTrial = %+v, %v; want the same trial", again, err)
	}

	running, err := s.StartTrial(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if running.ID != pending.ID || running.Status != TrialRunning || running.StartedAt.IsZero() || !running.Unfinished() {
		t.Fatalf("StartTrial = %+v", running)
	}
	if _, err := s.StartTrial(ctx, in); err != nil {
		t.Fatalf("restarting a running trial (after a crash): %v", err)
	}

	if err := s.AppendEvent(ctx, running.ID, logEvent("hello")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutScores(ctx, running.ID, []Score{{Name: "task-success", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutArtifact(ctx, running.ID, "diff", "text/x-diff", strings.NewReader("--- a\n+++ b\n")); err != nil {
		t.Fatal(err)
	}

	fail := false
	res := TrialResult{
		Status:    TrialFinished,
		Passed:    &fail,
		Output:    "the answer",
		Isolation: json.RawMessage(`{"rung":"bwrap","limits":["memory"]}`),
		Usage:     trajectory.Usage{InputTokens: 100, OutputTokens: 20},
		CostUSD:   0.0125,
		// Two attempts: a retried one spent as much again.
		SpendUsage:   trajectory.Usage{InputTokens: 200, OutputTokens: 40},
		SpendCostUSD: 0.025,
	}
	if err := s.FinishTrial(ctx, running.ID, res); err != nil {
		t.Fatal(err)
	}
	done, err := s.GetTrial(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != TrialFinished || done.Passed == nil || *done.Passed || done.Output != "the answer" ||
		done.Usage != res.Usage || done.CostUSD != res.CostUSD || string(done.Isolation) != string(res.Isolation) ||
		done.SpendUsage != res.SpendUsage || done.SpendCostUSD != res.SpendCostUSD ||
		done.FinishedAt.IsZero() || done.Unfinished() {
		t.Fatalf("finished trial = %+v", done)
	}
	if _, err := s.StartTrial(ctx, in); err == nil || !strings.Contains(err.Error(), "reset it") {
		t.Fatalf("starting a finished trial: err = %v, want a hint to reset it", err)
	}

	reset, err := s.ResetTrial(ctx, running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if reset.Attempt != 2 || reset.Status != TrialPending || reset.Passed != nil || reset.Output != "" ||
		reset.Isolation != nil || reset.Usage.Total() != 0 || !reset.FinishedAt.IsZero() || string(reset.Record) != string(in.Record) {
		t.Fatalf("reset trial = %+v", reset)
	}
	if n, _ := s.CountEvents(ctx, reset.ID); n != 0 {
		t.Errorf("reset trial still has %d events", n)
	}
	if sc, _ := s.TrialScores(ctx, reset.ID); len(sc) != 0 {
		t.Errorf("reset trial still has scores %+v", sc)
	}
	if as, _ := s.Artifacts(ctx, reset.ID); len(as) != 0 {
		t.Errorf("reset trial still has artifacts %+v", as)
	}
	if _, err := s.StartTrial(ctx, in); err != nil {
		t.Fatalf("starting a reset trial: %v", err)
	}
}

func TestTrialInputValidation(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, err := s.CreateRun(ctx, RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   TrialInput
		want string
	}{
		{"no run", TrialInput{RecordID: "a"}, "run id is empty"},
		{"no record", TrialInput{RunID: r.ID}, "record id is empty"},
		{"negative trial", TrialInput{RunID: r.ID, RecordID: "a", Trial: -1}, "negative"},
		{"bad record json", TrialInput{RunID: r.ID, RecordID: "a", Record: json.RawMessage("{")}, "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.StartTrial(ctx, tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("StartTrial(%+v) err = %v, want it to mention %q", tt.in, err, tt.want)
			}
		})
	}
	tr, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []TrialResult{{Status: TrialRunning}, {Status: ""}, {Status: TrialFinished, Isolation: json.RawMessage("nope")}} {
		if err := s.FinishTrial(ctx, tr.ID, res); err == nil {
			t.Errorf("FinishTrial(%+v) succeeded, want an error", res)
		}
	}
}

func TestListTrialsInRegistrationOrder(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, err := s.CreateRun(ctx, RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateRun(ctx, RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertTrial(ctx, TrialInput{RunID: other.ID, RecordID: "a"}); err != nil {
		t.Fatal(err)
	}
	// Registered out of order; listed in registration (enqueue) order.
	ids := map[string]string{}
	for _, rec := range []string{"c", "a", "b"} {
		for _, i := range []int{1, 0} {
			tr, err := s.UpsertTrial(ctx, TrialInput{RunID: r.ID, RecordID: rec, Trial: i})
			if err != nil {
				t.Fatal(err)
			}
			ids[rec+string(rune('0'+i))] = tr.ID
		}
	}
	if _, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: "b", Trial: 0}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTrial(ctx, ids["a0"], TrialResult{Status: TrialFinished}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTrial(ctx, ids["c1"], TrialResult{Status: TrialErrored, ErrorKind: "setup", Error: "image did not pull"}); err != nil {
		t.Fatal(err)
	}

	key := func(ts []Trial) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.RecordID+string(rune('0'+t.Trial))+":"+t.Status)
		}
		return out
	}
	all, err := s.ListTrials(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantAll := []string{"c1:errored", "c0:pending", "a1:pending", "a0:finished", "b1:pending", "b0:running"}
	if got := key(all); !slices.Equal(got, wantAll) {
		t.Errorf("ListTrials = %v, want %v", got, wantAll)
	}
	if all[0].ErrorKind != "setup" || all[0].Error != "image did not pull" || all[0].Passed != nil {
		t.Errorf("errored trial = %+v", all[0])
	}
	un, err := s.UnfinishedTrials(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantUn := []string{"c0:pending", "a1:pending", "b1:pending", "b0:running"}
	if got := key(un); !slices.Equal(got, wantUn) {
		t.Errorf("UnfinishedTrials = %v, want %v", got, wantUn)
	}

	empty, err := s.CreateRun(ctx, RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := s.ListTrials(ctx, empty.ID); err != nil || len(ts) != 0 {
		t.Errorf("ListTrials of a run without trials = %v, %v; want none, no error", ts, err)
	}
}

func TestLargeTrialOutputGoesToBlob(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	out := strings.Repeat("0123456789", InlineLimit/10+1)
	if err := s.FinishTrial(ctx, tr.ID, TrialResult{Status: TrialFinished, Output: out}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTrial(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Output != out || got.OutputBlob == "" {
		t.Fatalf("large output: blob %q, len %d, want len %d in a blob", got.OutputBlob, len(got.Output), len(out))
	}
	var inline *string
	if err := s.db.QueryRowContext(ctx, "SELECT output FROM trials WHERE id = ?", tr.ID).Scan(&inline); err != nil {
		t.Fatal(err)
	}
	if inline != nil {
		t.Errorf("large output also stored inline (%d bytes)", len(*inline))
	}
	ts, err := s.ListTrials(ctx, tr.RunID)
	if err != nil || len(ts) != 1 || ts[0].Output != out {
		t.Errorf("ListTrials does not resolve the blob output: %v", err)
	}
}

func TestScores(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, t1 := newTrial(t, s)
	t2, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: "rec-2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutScores(ctx, t1.ID, []Score{
		{Name: "task-success", Value: 1},
		{Name: "code-quality", Value: 0.8, Details: json.RawMessage(`{"reasons":["clean"]}`)},
	}); err != nil {
		t.Fatal(err)
	}
	// Replacing one score keeps the other.
	if err := s.PutScores(ctx, t1.ID, []Score{{Name: "task-success", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutScores(ctx, t2.ID, []Score{{Name: "task-success", Value: math.Inf(1)}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Scores(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[t1.ID]) != 2 || len(got[t2.ID]) != 1 {
		t.Fatalf("Scores = %+v", got)
	}
	if cq := got[t1.ID][0]; cq.Name != "code-quality" || cq.Value != 0.8 || string(cq.Details) != `{"reasons":["clean"]}` {
		t.Errorf("code-quality = %+v", cq)
	}
	if ts := got[t1.ID][1]; ts.Name != "task-success" || ts.Value != 0 || ts.Details != nil {
		t.Errorf("task-success = %+v", ts)
	}
	if v := got[t2.ID][0].Value; !math.IsInf(v, 1) {
		t.Errorf("+Inf round-tripped as %v", v)
	}

	bad := []struct {
		name  string
		score Score
	}{
		{"no name", Score{Value: 1}},
		{"NaN", Score{Name: "x", Value: math.NaN()}},
		{"bad details", Score{Name: "x", Details: json.RawMessage("{")}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.PutScores(ctx, t1.ID, []Score{{Name: "ok", Value: 1}, tt.score}); err == nil {
				t.Fatal("PutScores succeeded, want an error")
			}
		})
	}
	// A rejected batch stores nothing.
	if sc, _ := s.TrialScores(ctx, t1.ID); len(sc) != 2 {
		t.Errorf("after rejected batches trial has %d scores, want 2", len(sc))
	}
}

func TestArtifacts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	if _, err := s.PutArtifact(ctx, tr.ID, "log", "text/plain", strings.NewReader("v1")); err != nil {
		t.Fatal(err)
	}
	a, err := s.PutArtifact(ctx, tr.ID, "log", "text/plain", strings.NewReader("version 2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutArtifact(ctx, tr.ID, "diff", "text/x-diff", strings.NewReader("+x")); err != nil {
		t.Fatal(err)
	}
	as, err := s.Artifacts(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Name != "diff" || as[1] != a || a.Size != int64(len("version 2")) {
		t.Fatalf("Artifacts = %+v", as)
	}
	rc, err := s.OpenBlob(ctx, as[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "version 2" {
		t.Errorf("artifact content = %q", b)
	}
}

// TestMigrationToQueueKeepsTrials builds a database at schema version 3
// (one row per trial) with events, scores, artifacts and evaluations, opens
// it (applying 0004, which rebuilds trials) and checks that every row
// survived, seq follows creation order, foreign keys still cascade, and the
// pool's connections enforce foreign keys again.
func TestMigrationToQueueKeepsTrials(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evalsi.db")
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT")
	for _, m := range ms[:3] {
		exec(m.SQL)
		exec("INSERT INTO schema_migrations VALUES (?, ?, '2026-01-01T00:00:00.000000000Z')", m.Version, m.Name)
	}
	exec("INSERT INTO runs (id, status, created_at) VALUES ('r-1', 'running', '2026-01-01T00:00:00.000000000Z')")
	// Created in the order b, a, c; b was reset once (attempt 2).
	for _, tr := range []struct{ id, rec, created, status string }{
		{"t-b", "b", "2026-01-01T00:00:01.000000000Z", "finished"},
		{"t-a", "a", "2026-01-01T00:00:02.000000000Z", "running"},
		{"t-c", "c", "2026-01-01T00:00:03.000000000Z", "pending"},
	} {
		exec("INSERT INTO trials (id, run_id, record_id, trial, attempt, status, record, spend_input_tokens, created_at) VALUES (?, 'r-1', ?, 0, ?, ?, '{\"id\":1}', 7, ?)",
			tr.id, tr.rec, map[bool]int{true: 2, false: 1}[tr.rec == "b"], tr.status, tr.created)
	}
	exec("INSERT INTO events (trial_id, seq, kind, time, payload) VALUES ('t-b', 1, 'log', '2026-01-01T00:00:01.000000000Z', '{}'), ('t-a', 1, 'log', '2026-01-01T00:00:01.000000000Z', '{}')")
	exec("INSERT INTO scores (trial_id, name, value) VALUES ('t-b', 'pass', 1)")
	exec("INSERT INTO artifacts (trial_id, name, digest, size) VALUES ('t-b', 'diff.patch', 'sha256:00', 0)")
	exec("INSERT INTO evaluations (trial_id, results) VALUES ('t-b', '[]')")
	db.Close()

	s := openAt(t, path)
	if v, err := s.SchemaVersion(ctx); err != nil || v < 4 {
		t.Fatalf("schema version %d, %v; want 4 or later", v, err)
	}
	ts, err := s.ListAttempts(ctx, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range ts {
		got = append(got, fmt.Sprintf("%s#%d:%s:%d", tr.RecordID, tr.Attempt, tr.Status, tr.SpendUsage.InputTokens))
	}
	if want := []string{"b#2:finished:7", "a#1:running:7", "c#1:pending:7"}; !slices.Equal(got, want) {
		t.Errorf("attempts after migration = %v, want %v (creation order, attempts and spend kept)", got, want)
	}
	count := func(table string) int {
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for table, want := range map[string]int{"events": 2, "scores": 1, "artifacts": 1, "evaluations": 1} {
		if n := count(table); n != want {
			t.Errorf("%s after migration: %d rows, want %d", table, n, want)
		}
	}
	// Every pooled connection enforces foreign keys again: a score of a
	// missing trial is refused on whichever connection runs it.
	for range 8 {
		if err := s.PutScores(ctx, "t-nope", []Score{{Name: "x", Value: 1}}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("PutScores of a missing trial = %v, want ErrNotFound", err)
		}
	}
	// ON DELETE CASCADE still reaches the rebuilt table and, through it,
	// events, scores, artifacts and evaluations.
	if err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "DELETE FROM runs WHERE id = 'r-1'")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"trials", "events", "scores", "artifacts", "evaluations"} {
		if n := count(table); n != 0 {
			t.Errorf("%s after deleting the run: %d rows, want 0", table, n)
		}
	}
}

// TestUnleasedTrialsAreOutsideTheQueue: a trial StartTrial marked running
// (embedded mode's recorder) has no lease: a lease forged with epoch 0 can
// write nothing to it, the sweeper (Requeue of expired leases) leaves it,
// and only Requeue{RunID, All} (resume) takes it back.
func TestUnleasedTrialsAreOutsideTheQueue(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	r, tr := newTrial(t, s)
	forged := Lease{TrialID: tr.ID, RunID: r.ID, Epoch: 0}
	if err := s.AppendLeased(ctx, forged, []trajectory.Event{logEvent("x")}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("AppendLeased with epoch 0 = %v, want ErrLeaseLost", err)
	}
	if _, err := s.Heartbeat(ctx, forged, time.Hour); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Heartbeat with epoch 0 = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, forged, Completion{Result: TrialResult{Status: TrialFinished}}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Complete with epoch 0 = %v, want ErrLeaseLost", err)
	}
	if back, err := s.Requeue(ctx, RequeueRequest{Expired: time.Now().Add(24 * time.Hour)}); err != nil || len(back) != 0 {
		t.Errorf("Requeue of expired leases = %v, %v; want the unleased trial left alone", back, err)
	}
	back, err := s.Requeue(ctx, RequeueRequest{RunID: r.ID, All: true})
	if err != nil || len(back) != 1 || back[0].Status != TrialLost || !strings.Contains(back[0].Error, "held no lease") {
		t.Fatalf("Requeue{RunID, All} = %+v, %v; want the trial lost", back, err)
	}
	if n, _ := s.CountEvents(ctx, tr.ID); n != 0 {
		t.Errorf("%d events written through forged leases", n)
	}
}

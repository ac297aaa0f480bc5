package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMigrationToCancelKeepsRunsAndTrials builds a database at schema
// version 4 (the queue) with a run of every column set and attempts with
// their leases, events, scores, artifacts and evaluations, opens it
// (applying 0005, which rebuilds runs and trials to allow 'cancelled') and
// checks that every row and column survived, that the run can be
// cancelled, that foreign keys still cascade from runs through trials, and
// that the pool's connections enforce foreign keys again.
func TestMigrationToCancelKeepsRunsAndTrials(t *testing.T) {
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
	for _, m := range ms[:4] {
		exec(m.SQL)
		exec("INSERT INTO schema_migrations VALUES (?, ?, '2026-01-01T00:00:00.000000000Z')", m.Version, m.Name)
	}
	exec(`INSERT INTO runs (id, name, spec, spec_path, status, created_at, finished_at, summary, error, project, max_running, dataset_version)
		VALUES ('r-old', 'old', '{"name":"old"}', 'old.yaml', 'failed', '2026-01-01T00:00:00.000000000Z', '2026-01-01T00:01:00.000000000Z',
			'{"status":"failed"}', 'it broke', 'alpha', 3, 'sha256:ab')`)
	exec(`INSERT INTO runs (id, name, status, created_at, project) VALUES ('r-live', 'live', 'running', '2026-01-02T00:00:00.000000000Z', 'alpha')`)
	for _, tr := range []struct {
		id, run, rec string
		attempt, seq int
		status       string
		epoch        int64
	}{
		{"t-1", "r-old", "a", 1, 1, "lost", 4},
		{"t-2", "r-old", "a", 2, 1, "finished", 5},
		{"t-3", "r-live", "b", 1, 1, "running", 6},
		{"t-4", "r-live", "c", 1, 2, "pending", 0},
	} {
		exec(`INSERT INTO trials (id, run_id, record_id, trial, attempt, seq, status, record, retries_used, lost_count,
				lease_owner, lease_until, lease_epoch, spend_input_tokens, created_at)
			VALUES (?, ?, ?, 0, ?, ?, ?, '{"id":1}', 1, 2, 'tok/w1', '2026-01-02T00:05:00.000000000Z', ?, 7, '2026-01-01T00:00:00.000000000Z')`,
			tr.id, tr.run, tr.rec, tr.attempt, tr.seq, tr.status, tr.epoch)
	}
	exec("INSERT INTO events (trial_id, seq, kind, time, payload) VALUES ('t-2', 1, 'log', '2026-01-01T00:00:01.000000000Z', '{}'), ('t-3', 1, 'log', '2026-01-01T00:00:01.000000000Z', '{}')")
	exec("INSERT INTO scores (trial_id, name, value) VALUES ('t-2', 'pass', 1)")
	exec("INSERT INTO artifacts (trial_id, name, digest, size) VALUES ('t-2', 'diff.patch', 'sha256:00', 0)")
	exec("INSERT INTO evaluations (trial_id, results) VALUES ('t-2', '[]')")
	db.Close()

	s := openAt(t, path)
	if v, err := s.SchemaVersion(ctx); err != nil || v < 5 {
		t.Fatalf("schema version %d, %v; want 5 or later", v, err)
	}
	old, err := s.GetRun(ctx, "r-old")
	if err != nil {
		t.Fatal(err)
	}
	if old.Name != "old" || string(old.Spec) != `{"name":"old"}` || old.SpecPath != "old.yaml" || old.Status != RunFailed ||
		old.FinishedAt.IsZero() || string(old.Summary) != `{"status":"failed"}` || old.Error != "it broke" ||
		old.Project != "alpha" || old.MaxRunning != 3 || old.DatasetVersion != "sha256:ab" {
		t.Errorf("run after migration: %+v; want every column as it was", old)
	}
	var got []string
	for _, run := range []string{"r-old", "r-live"} {
		ts, err := s.ListAttempts(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			got = append(got, fmt.Sprintf("%s/%s#%d:%s:epoch=%d:owner=%s:retries=%d:spend=%d:until=%v", tr.RunID, tr.RecordID, tr.Attempt, tr.Status,
				tr.LeaseEpoch, tr.LeaseOwner, tr.RetriesUsed, tr.SpendUsage.InputTokens, !tr.LeaseUntil.IsZero()))
		}
	}
	want := []string{
		"r-old/a#1:lost:epoch=4:owner=tok/w1:retries=1:spend=7:until=true",
		"r-old/a#2:finished:epoch=5:owner=tok/w1:retries=1:spend=7:until=true",
		"r-live/b#1:running:epoch=6:owner=tok/w1:retries=1:spend=7:until=true",
		"r-live/c#1:pending:epoch=0:owner=tok/w1:retries=1:spend=7:until=true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("attempts after migration:\n got  %v\n want %v", got, want)
	}
	var lost int
	if err := s.db.QueryRowContext(ctx, "SELECT lost_count FROM trials WHERE id = 't-3'").Scan(&lost); err != nil || lost != 2 {
		t.Errorf("lost_count after migration = %d, %v; want 2", lost, err)
	}
	count := func(table string) int {
		t.Helper()
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for table, want := range map[string]int{"runs": 2, "trials": 4, "events": 2, "scores": 1, "artifacts": 1, "evaluations": 1} {
		if n := count(table); n != want {
			t.Errorf("%s after migration: %d rows, want %d", table, n, want)
		}
	}

	// The rebuilt tables take the new status, and leases still fence.
	live, err := s.CancelRun(ctx, "r-live")
	if err != nil || live.Status != RunCancelled {
		t.Fatalf("CancelRun after migration = %+v, %v", live, err)
	}
	if _, err := s.Heartbeat(ctx, Lease{TrialID: "t-3", RunID: "r-live", Epoch: 6}, time.Minute); !errors.Is(err, ErrCancelled) {
		t.Errorf("Heartbeat of the cancelled attempt = %v, want ErrCancelled", err)
	}
	// Every pooled connection enforces foreign keys again.
	for range 8 {
		if err := s.PutScores(ctx, "t-nope", []Score{{Name: "x", Value: 1}}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("PutScores of a missing trial = %v, want ErrNotFound", err)
		}
	}
	// ON DELETE CASCADE reaches from the rebuilt runs through the rebuilt
	// trials to events, scores, artifacts and evaluations.
	if err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "DELETE FROM runs")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"trials", "events", "scores", "artifacts", "evaluations"} {
		if n := count(table); n != 0 {
			t.Errorf("%s after deleting the runs: %d rows, want 0", table, n)
		}
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/spec"
	"evals.si/trajectory"
)

// openTest opens a fresh store in a temporary directory, closed at cleanup.
func openTest(t testing.TB) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "evalsi.db"))
}

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newTrial creates a run and starts one trial in it.
func newTrial(t testing.TB, s *Store) (Run, Trial) {
	t.Helper()
	ctx := context.Background()
	r, err := s.CreateRun(ctx, RunInput{Spec: &spec.Spec{Name: "test"}})
	if err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	tr, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: "rec-1"})
	if err != nil {
		t.Fatalf("StartTrial: %v", err)
	}
	return r, tr
}

func logEvent(text string) trajectory.Event {
	return trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}}
}

func TestOpenMigratesEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	// A nested directory that does not exist yet: Open creates it.
	path := filepath.Join(t.TempDir(), "a", "b", "evalsi.db")
	s := openAt(t, path)

	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := ms[len(ms)-1].Version; v != want {
		t.Errorf("SchemaVersion = %d, want %d", v, want)
	}
	for _, table := range []string{"runs", "trials", "events", "scores", "artifacts", "schema_migrations"} {
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("table %s missing after migration", table)
		}
	}
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "synchronous": "2"} {
		var got string
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(filepath.Dir(path), "blobs", "tmp")); err != nil || !fi.IsDir() {
		t.Errorf("blob directory not created: %v", err)
	}

	// Reopening applies nothing twice.
	s.Close()
	s2 := openAt(t, path)
	var n int
	if err := s2.db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) {
		t.Errorf("schema_migrations has %d rows after reopen, want %d", n, len(ms))
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evalsi.db")
	s := openAt(t, path)
	if _, err := s.db.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 'x')"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "upgrade evalsi") {
		t.Fatalf("Open of a newer schema: err = %v, want one telling to upgrade evalsi", err)
	}
}

func TestDefaultPath(t *testing.T) {
	home := t.TempDir()
	tests := []struct {
		name, xdg, want string
	}{
		{"xdg set", "/data/xdg", "/data/xdg/evalsi/evalsi.db"},
		{"xdg unset", "", filepath.Join(home, ".local/share/evalsi/evalsi.db")},
		{"xdg relative is ignored", "relative/dir", filepath.Join(home, ".local/share/evalsi/evalsi.db")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			got, err := DefaultPath()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("DefaultPath() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOpenEmptyPathUsesDefault(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_DATA_HOME", xdg)
	s, err := Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := filepath.Join(xdg, "evalsi", "evalsi.db"); s.Path() != want {
		t.Errorf("Path() = %s, want %s", s.Path(), want)
	}
}

func TestOpenPathWithURICharacters(t *testing.T) {
	// '?', '#' and '%' in a directory name must not be read as URI syntax.
	path := filepath.Join(t.TempDir(), "odd?dir#x%41", "evalsi.db")
	s := openAt(t, path)
	if _, err := s.CreateRun(context.Background(), RunInput{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %s: %v", path, err)
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evalsi.db")
	s := openAt(t, path)
	r, tr := newTrial(t, s)
	for i := range 3 {
		if err := s.AppendEvent(ctx, tr.ID, logEvent(strings.Repeat("x", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutScores(ctx, tr.ID, []Score{{Name: "task-success", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	pass := true
	if err := s.FinishTrial(ctx, tr.ID, TrialResult{Status: TrialFinished, Passed: &pass, Output: "42"}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, r.ID, RunCompleted, []byte(`{"task-success":1}`), ""); err != nil {
		t.Fatal(err)
	}
	d, err := s.PutBlob(ctx, []byte("diff"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path)
	gr, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if gr.Status != RunCompleted || string(gr.Summary) != `{"task-success":1}` || gr.FinishedAt.IsZero() {
		t.Errorf("run after reopen = %+v", gr)
	}
	gs, err := gr.DecodeSpec()
	if err != nil || gs.Name != "test" {
		t.Errorf("DecodeSpec = %+v, %v; want name test", gs, err)
	}
	gt, err := s.GetTrial(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if gt.Status != TrialFinished || gt.Passed == nil || !*gt.Passed || gt.Output != "42" {
		t.Errorf("trial after reopen = %+v", gt)
	}
	if n, err := s.CountEvents(ctx, tr.ID); err != nil || n != 3 {
		t.Errorf("CountEvents = %d, %v; want 3", n, err)
	}
	if sc, err := s.TrialScores(ctx, tr.ID); err != nil || len(sc) != 1 || sc[0].Value != 1 {
		t.Errorf("TrialScores = %+v, %v", sc, err)
	}
	if b, err := s.GetBlob(ctx, d); err != nil || string(b) != "diff" {
		t.Errorf("GetBlob = %q, %v", b, err)
	}
}

func TestErrNotFound(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	tests := []struct {
		name string
		call func() error
	}{
		{"GetRun", func() error { _, err := s.GetRun(ctx, "r-nope"); return err }},
		{"FinishRun", func() error { return s.FinishRun(ctx, "r-nope", RunFailed, nil, "x") }},
		{"ResumeRun", func() error { _, err := s.ResumeRun(ctx, "r-nope"); return err }},
		{"ListTrials", func() error { _, err := s.ListTrials(ctx, "r-nope"); return err }},
		{"UnfinishedTrials", func() error { _, err := s.UnfinishedTrials(ctx, "r-nope"); return err }},
		{"StartTrial", func() error {
			_, err := s.StartTrial(ctx, TrialInput{RunID: "r-nope", RecordID: "a"})
			return err
		}},
		{"GetTrial", func() error { _, err := s.GetTrial(ctx, "t-nope"); return err }},
		{"FinishTrial", func() error { return s.FinishTrial(ctx, "t-nope", TrialResult{Status: TrialErrored}) }},
		{"ResetTrial", func() error { _, err := s.ResetTrial(ctx, "t-nope"); return err }},
		{"AppendEvent", func() error { return s.AppendEvent(ctx, "t-nope", logEvent("x")) }},
		{"PutScores", func() error { return s.PutScores(ctx, "t-nope", []Score{{Name: "a", Value: 1}}) }},
		{"PutArtifact", func() error {
			_, err := s.PutArtifact(ctx, "t-nope", "diff", "text/x-diff", strings.NewReader("d"))
			return err
		}},
		{"GetBlob", func() error {
			_, err := s.GetBlob(ctx, "sha256:"+strings.Repeat("0", 64))
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	}
	// The trial made by newTrial is untouched by the failed calls.
	if n, err := s.CountEvents(ctx, tr.ID); err != nil || n != 0 {
		t.Errorf("CountEvents = %d, %v", n, err)
	}
}

// Processes that open one new store at the same moment (a run and a
// watcher, two workers) race to switch it to WAL and migrate it; SQLite
// answers some of those steps with SQLITE_BUSY at once, which Open must
// wait out rather than fail on. SQLite's locks are per process, so the
// openers are processes: this test binary run again.
func TestOpenConcurrentNewStore(t *testing.T) {
	if path := os.Getenv("EVALSI_STORE_OPEN_CHILD"); path != "" {
		s, err := Open(context.Background(), path)
		if err == nil {
			err = s.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		path := filepath.Join(t.TempDir(), "evalsi.db")
		const n = 6
		cmds := make([]*exec.Cmd, n)
		for i := range cmds {
			cmds[i] = exec.Command(exe, "-test.run=^TestOpenConcurrentNewStore$", "-test.count=1")
			cmds[i].Env = append(os.Environ(), "EVALSI_STORE_OPEN_CHILD="+path)
		}
		outs := make(chan string, n)
		for _, c := range cmds {
			go func() {
				out, err := c.CombinedOutput()
				if err != nil {
					outs <- fmt.Sprintf("%v: %s", err, out)
					return
				}
				outs <- ""
			}()
		}
		for range n {
			if o := <-outs; o != "" {
				t.Fatalf("round %d: a concurrent Open failed: %s", round, o)
			}
		}
	}
}

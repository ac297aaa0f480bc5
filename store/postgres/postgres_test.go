package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/internal/testenv/pgtest"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/postgres"
	"evals.si/store/storetest"
	"evals.si/trajectory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// open opens a store on a fresh database of the test cluster, with blobs
// in the test's temporary directory.
func open(t *testing.T) *postgres.Store {
	t.Helper()
	dsn := pgtest.Start(t)
	blobs, err := store.OpenFSBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(context.Background(), dsn, blobs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Backend { return open(t) })
}

// Servers starting at once on a new database migrate it once: the others
// wait on the advisory lock and find nothing to do.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t)
	blobs, err := store.OpenFSBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(ctx, dsn, blobs) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rows, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM schema_version").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	v, err := stores[0].SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows != distinct || v != rows || v < 1 {
		t.Errorf("schema_version has %d rows (%d versions), SchemaVersion %d: want each migration recorded once", rows, distinct, v)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t)
	blobs, _ := store.OpenFSBlobs(t.TempDir())
	s, err := postgres.Open(ctx, dsn, blobs)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO schema_version (version, name) VALUES (9999, '9999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(ctx, dsn, blobs); err == nil || !strings.Contains(err.Error(), "upgrade evalsi") {
		t.Fatalf("Open of a newer schema: err = %v, want one telling to upgrade evalsi", err)
	}
}

// A DSN that does not parse is reported without echoing it: it may hold
// a password.
func TestOpenDoesNotEchoTheDSN(t *testing.T) {
	blobs, _ := store.OpenFSBlobs(t.TempDir())
	_, err := postgres.Open(context.Background(), "postgres://u:hunter2-secret@127.0.0.1:notaport/db", blobs)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Open with a bad DSN: err = %v; want an error without the password", err)
	}
}

// Two stores on one database, as two servers: leasers racing through both
// never get the same attempt, and never more than a run's MaxRunning.
func TestLeasesAcrossStores(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t)
	blobs, _ := store.OpenFSBlobs(t.TempDir())
	var stores [2]*postgres.Store
	for i := range stores {
		s, err := postgres.Open(ctx, dsn, blobs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	enqueue := func(in store.RunInput, n int) store.Run {
		r, err := stores[0].CreateRun(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var ins []store.TrialInput
		for i := range n {
			ins = append(ins, store.TrialInput{RecordID: fmt.Sprintf("rec-%02d", i)})
		}
		if err := stores[1].Enqueue(ctx, r.ID, ins); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tt := range []struct {
		name             string
		maxRunning, want int
	}{
		{"capped", 3, 3},
		{"uncapped", 0, 40},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := enqueue(store.RunInput{Name: tt.name, MaxRunning: tt.maxRunning}, 40)
			var mu sync.Mutex
			got := map[string]int{}
			epochs := map[int64]bool{}
			var wg sync.WaitGroup
			for w := range 8 {
				s := stores[w%2]
				wg.Go(func() {
					for {
						l, err := s.Lease(ctx, store.LeaseRequest{Worker: fmt.Sprint("w", w), TTL: time.Hour, Runs: []string{r.ID}})
						if errors.Is(err, store.ErrNoWork) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						got[l.TrialID]++
						epochs[l.Epoch] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(got) != tt.want || len(epochs) != tt.want {
				t.Errorf("%d attempts leased under %d epochs, want %d", len(got), len(epochs), tt.want)
			}
			for id, n := range got {
				if n != 1 {
					t.Errorf("attempt %s leased %d times", id, n)
				}
			}
			if n, err := stores[0].CountTrials(ctx, r.ID); err != nil || n[store.TrialRunning] != tt.want {
				t.Errorf("CountTrials = %v, %v; want %d running", n, err, tt.want)
			}
		})
	}
}

// The secret written through the store's APIs is nowhere in the database
// (every row of every table, as text) nor in the blob directory.
func TestSecretsNeverInTheDatabase(t *testing.T) {
	ctx := context.Background()
	const secret = `sk-test-"quoted"&<tag>\back-0123456789`
	dsn := pgtest.Start(t)
	dir := t.TempDir()
	blobs, _ := store.OpenFSBlobs(dir)
	s, err := postgres.Open(ctx, dsn, blobs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.AddSecrets(secret)
	r, err := s.CreateRun(ctx, store.RunInput{Name: secret, Spec: &spec.Spec{Name: secret}, DatasetVersion: secret})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]string{"input": secret})
	if err := s.Enqueue(ctx, r.ID, []store.TrialInput{{RecordID: "a", Record: rec}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Lease(ctx, store.LeaseRequest{Worker: secret, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("y", store.InlineLimit) + secret
	evs := []trajectory.Event{
		{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: secret}},
		{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: big}},
	}
	if err := s.AppendLeased(ctx, l, evs); err != nil {
		t.Fatal(err)
	}
	details, _ := json.Marshal(map[string]string{"why": secret})
	iso, _ := json.Marshal(map[string]string{"note": secret})
	if err := s.Complete(ctx, l, store.Completion{
		Result:      store.TrialResult{Status: store.TrialErrored, ErrorKind: secret, Error: secret, Output: secret, Isolation: iso},
		Scores:      []store.Score{{Name: "judge", Value: 1, Details: details}},
		Evaluations: json.RawMessage(`[{"details":` + string(details) + `}]`),
		Artifacts:   []store.ArtifactInput{{Name: "log", Data: []byte(big)}},
		Retry:       true,
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, r.ID, store.RunFailed, details, secret); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tables, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(tables, pgx.RowTo[string])
	if err != nil || len(names) < 6 {
		t.Fatalf("tables %v, %v", names, err)
	}
	forms := []string{secret, "sk-test-", strings.Trim(mustJSON(secret), `"`)}
	rows := 0
	for _, table := range names {
		q := "SELECT x::text FROM " + pgx.Identifier{table}.Sanitize() + " x"
		all, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		texts, err := pgx.CollectRows(all, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			rows++
			for _, f := range forms {
				if strings.Contains(text, f) {
					t.Errorf("table %s holds %q: %.200s", table, f, text)
				}
			}
		}
	}
	if rows < 8 {
		t.Fatalf("scanned %d rows; the writes above make more", rows)
	}
	files := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, f := range forms {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("blob %s holds %q", p, f)
			}
		}
		return nil
	})
	if err != nil || files < 2 {
		t.Fatalf("scanned %d blob files, %v; want the large event and the artifact", files, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/trajectory"
)

func TestEventsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	at := time.Date(2026, 11, 29, 8, 53, 1, 123456789, time.FixedZone("CET", 3600))
	exit := 3
	in := []trajectory.Event{
		{Kind: trajectory.KindMessage, Time: at, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: "fix the bug"}},
		{Kind: trajectory.KindModelCall, Time: at, Step: 1, DurationMS: 812, ModelCall: &trajectory.ModelCall{Model: "m", Usage: trajectory.Usage{InputTokens: 10, OutputTokens: 5}, CostUSD: 0.001}},
		{Kind: trajectory.KindToolCall, Time: at, Step: 1, ToolCall: &trajectory.ToolCall{ID: "c1", Name: "bash", Arguments: json.RawMessage(`{"cmd":"ls"}`)}},
		{Kind: trajectory.KindToolResult, Time: at, Step: 1, ToolResult: &trajectory.ToolResult{CallID: "c1", Name: "bash", Output: "a\nb", ExitCode: &exit, IsError: true}},
		{Kind: trajectory.KindPolicy, Time: at, Policy: &trajectory.Policy{Kind: "network", Host: "example.com"}},
		{Kind: trajectory.KindEscalation, Time: at, Escalation: &trajectory.Escalation{Kind: "network", Granted: false}},
		{Kind: trajectory.KindChecker, Time: at, Checker: &trajectory.Checker{Command: []string{"pytest"}, Pass: true, Score: 1}},
		{Kind: trajectory.KindStop, Time: at, Stop: &trajectory.Stop{Reason: "answered"}},
		{Kind: trajectory.KindError, Time: at, Error: &trajectory.Error{Kind: "infra", Message: "x"}},
	}
	for _, e := range in {
		if err := s.AppendEvent(ctx, tr.ID, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Events(ctx, tr.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("got %d events, want %d", len(got), len(in))
	}
	for i := range in {
		want := in[i]
		want.Seq = i + 1
		want.Time = at.UTC()
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

func TestAppendEventSeqAndPaging(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	before := time.Now()
	for i := range 10 {
		if err := s.AppendEvent(ctx, tr.ID, logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// An explicit seq is kept; one already taken is refused.
	if err := s.AppendEvent(ctx, tr.ID, trajectory.Event{Seq: 20, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "20"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, tr.ID, trajectory.Event{Seq: 5, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "dup"}}); err == nil || !strings.Contains(err.Error(), "seq 5 is already recorded") {
		t.Errorf("duplicate seq: err = %v", err)
	}
	// The next automatic seq follows the highest.
	if err := s.AppendEvent(ctx, tr.ID, logEvent("21")); err != nil {
		t.Fatal(err)
	}

	seqs := func(es []trajectory.Event) []int {
		var out []int
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	tests := []struct {
		after, limit int
		want         []int
	}{
		{0, 0, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21}},
		{0, 3, []int{1, 2, 3}},
		{3, 3, []int{4, 5, 6}},
		{9, 0, []int{10, 20, 21}},
		{21, 0, nil},
		{-5, 2, []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("after%d_limit%d", tt.after, tt.limit), func(t *testing.T) {
			es, err := s.Events(ctx, tr.ID, tt.after, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := seqs(es); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Events(after %d, limit %d) = %v, want %v", tt.after, tt.limit, got, tt.want)
			}
		})
	}
	es, _ := s.Events(ctx, tr.ID, 0, 1)
	if es[0].Log.Text != "0" || es[0].Time.Before(before.Add(-time.Second)) || es[0].Time.Location() != time.UTC {
		t.Errorf("first event = %+v; want text 0 and a UTC time stamped at append", es[0])
	}
	if n, err := s.CountEvents(ctx, tr.ID); err != nil || n != 12 {
		t.Errorf("CountEvents = %d, %v; want 12", n, err)
	}

	for _, bad := range []trajectory.Event{{Log: &trajectory.Log{Text: "no kind"}}, {Seq: -1, Kind: trajectory.KindLog}} {
		if err := s.AppendEvent(ctx, tr.ID, bad); err == nil {
			t.Errorf("AppendEvent(%+v) succeeded, want an error", bad)
		}
	}
}

func TestLargeEventPayloadGoesToBlob(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	big := strings.Repeat("line of tool output\n", InlineLimit/10)
	if err := s.AppendEvent(ctx, tr.ID, trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{CallID: "c", Name: "bash", Output: big}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, tr.ID, logEvent("small")); err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT seq, payload IS NULL, payload_blob FROM events WHERE trial_id = ? ORDER BY seq", tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	var blobs []string
	for rows.Next() {
		var seq int
		var noInline bool
		var blob *string
		if err := rows.Scan(&seq, &noInline, &blob); err != nil {
			t.Fatal(err)
		}
		if (seq == 1) != noInline || (seq == 1) != (blob != nil) {
			t.Errorf("event %d: inline payload missing = %v, blob = %v", seq, noInline, blob)
		}
		if blob != nil {
			blobs = append(blobs, *blob)
		}
	}
	rows.Close()
	if len(blobs) != 1 {
		t.Fatalf("want exactly one event in a blob, got %d", len(blobs))
	}
	if _, err := os.Stat(s.blobPath(strings.TrimPrefix(blobs[0], "sha256:"))); err != nil {
		t.Errorf("event blob file: %v", err)
	}
	es, err := s.Events(ctx, tr.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].ToolResult == nil || es[0].ToolResult.Output != big || es[0].Seq != 1 || es[1].Log.Text != "small" {
		t.Errorf("events read back wrong: %d events", len(es))
	}
}

func TestSink(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	var sink trajectory.Sink = s.Sink(ctx, tr.ID)
	for i := range 3 {
		if err := sink.Emit(logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := s.CountEvents(ctx, tr.ID); n != 3 {
		t.Errorf("sink appended %d events, want 3", n)
	}
}

// TestConcurrentAppends runs 64 trials appending events at once, as a run at
// concurrency 64 does, with readers polling alongside; then 64 goroutines
// sharing one trial; then two Stores (as two processes would) on one file.
// None may see SQLITE_BUSY or any other error, and seqs must be gapless.
func TestConcurrentAppends(t *testing.T) {
	const workers, perWorker = 64, 20
	ctx := context.Background()

	t.Run("one trial each", func(t *testing.T) {
		s := openTest(t)
		r, err := s.CreateRun(ctx, RunInput{})
		if err != nil {
			t.Fatal(err)
		}
		trials := make([]Trial, workers)
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers*perWorker)
		for w := range workers {
			wg.Go(func() {
				tr, err := s.StartTrial(ctx, TrialInput{RunID: r.ID, RecordID: fmt.Sprintf("rec-%02d", w)})
				if err != nil {
					errs <- err
					return
				}
				trials[w] = tr
				for i := range perWorker {
					if err := s.AppendEvent(ctx, tr.ID, logEvent(fmt.Sprintf("%d/%d", w, i))); err != nil {
						errs <- err
					}
					// A viewer tailing the trial meanwhile.
					if _, err := s.Events(ctx, tr.ID, i-1, 0); err != nil {
						errs <- err
					}
				}
				if err := s.PutScores(ctx, tr.ID, []Score{{Name: "task-success", Value: 1}}); err != nil {
					errs <- err
				}
				if err := s.FinishTrial(ctx, tr.ID, TrialResult{Status: TrialFinished}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for w, tr := range trials {
			es, err := s.Events(ctx, tr.ID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != perWorker {
				t.Fatalf("trial %d has %d events, want %d", w, len(es), perWorker)
			}
			for i, e := range es {
				if e.Seq != i+1 || e.Log.Text != fmt.Sprintf("%d/%d", w, i) {
					t.Fatalf("trial %d event %d = seq %d %q", w, i, e.Seq, e.Log.Text)
				}
			}
		}
		sc, err := s.Scores(ctx, r.ID)
		if err != nil || len(sc) != workers {
			t.Errorf("Scores has %d trials, %v; want %d", len(sc), err, workers)
		}
	})

	t.Run("one shared trial", func(t *testing.T) {
		s := openTest(t)
		_, tr := newTrial(t, s)
		appendAll(t, []*Store{s}, tr.ID, workers, perWorker)
		checkGapless(t, s, tr.ID, workers*perWorker)
	})

	t.Run("two stores on one file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "evalsi.db")
		a, b := openAt(t, path), openAt(t, path)
		_, tr := newTrial(t, a)
		appendAll(t, []*Store{a, b}, tr.ID, workers, perWorker)
		checkGapless(t, b, tr.ID, workers*perWorker)
	})
}

func appendAll(t *testing.T, stores []*Store, trialID string, workers, perWorker int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			for i := range perWorker {
				if err := s.AppendEvent(context.Background(), trialID, logEvent(fmt.Sprintf("%d/%d", w, i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func checkGapless(t *testing.T, s *Store, trialID string, n int) {
	t.Helper()
	es, err := s.Events(context.Background(), trialID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != n {
		t.Fatalf("%d events, want %d", len(es), n)
	}
	seen := map[string]bool{}
	for i, e := range es {
		if e.Seq != i+1 {
			t.Fatalf("event %d has seq %d: seqs are not gapless", i, e.Seq)
		}
		if seen[e.Log.Text] {
			t.Fatalf("event %q stored twice", e.Log.Text)
		}
		seen[e.Log.Text] = true
	}
}

// crashEnv tells the test binary, re-run as a child, to act as a process that
// dies mid-run.
const crashEnv = "EVALSI_STORE_CRASH_DB"

const crashEvents = 50

// TestCrashChild is the child side of TestCrashKeepsEvents: it appends
// events, reports the trial id, and kills itself with SIGKILL, so nothing
// is closed or flushed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("helper for TestCrashKeepsEvents; runs only as its child")
	}
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	_, tr := newTrial(t, s)
	for i := range crashEvents {
		if err := s.AppendEvent(ctx, tr.ID, logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path+".trial", []byte(tr.ID), 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // not reached
}

func TestCrashKeepsEvents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evalsi.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child should die by SIGKILL; err = %v, output:\n%s", err, out)
	}
	id, err := os.ReadFile(path + ".trial")
	if err != nil {
		t.Fatalf("child did not report its trial: %v\n%s", err, out)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Logf("no WAL file left behind (%v); the crash still has to be survived", err)
	}

	s := openAt(t, path)
	es, err := s.Events(ctx, string(id), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != crashEvents {
		t.Fatalf("after the crash %d events survive, want %d", len(es), crashEvents)
	}
	for i, e := range es {
		if e.Seq != i+1 || e.Log.Text != fmt.Sprint(i) {
			t.Fatalf("event %d = seq %d %q", i, e.Seq, e.Log.Text)
		}
	}
	tr, err := s.GetTrial(ctx, string(id))
	if err != nil {
		t.Fatal(err)
	}
	un, err := s.UnfinishedTrials(ctx, tr.RunID)
	if err != nil || len(un) != 1 || un[0].ID != tr.ID || un[0].Status != TrialRunning {
		t.Fatalf("UnfinishedTrials after crash = %+v, %v; want the running trial", un, err)
	}
	r, err := s.GetRun(ctx, tr.RunID)
	if err != nil || r.Status != RunRunning {
		t.Fatalf("run after crash = %+v, %v; want still running", r, err)
	}
	// Resume: reset the trial and continue appending.
	if _, err := s.ResetTrial(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, tr.ID, logEvent("again")); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.Events(ctx, tr.ID, 0, 0); len(es) != 1 || es[0].Seq != 1 {
		t.Errorf("after reset: %+v", es)
	}
}

// TestGroupCommitIsolatesFailures mixes writes that fail (a taken seq) with
// writes that succeed, concurrently, so they share transactions: each failing
// write must fail alone and every other write must be kept.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	const workers, perWorker = 32, 10
	ctx := context.Background()
	s := openTest(t)
	_, tr := newTrial(t, s)
	if err := s.AppendEvent(ctx, tr.ID, trajectory.Event{Seq: 1_000_000, Kind: trajectory.KindLog, Log: &trajectory.Log{Text: "taken"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed, good := 0, 0
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				e := logEvent(fmt.Sprintf("%d/%d", w, i))
				bad := (w+i)%2 == 0
				if bad {
					e.Seq = 1_000_000
				}
				err := s.AppendEvent(ctx, tr.ID, e)
				mu.Lock()
				switch {
				case bad && err != nil && strings.Contains(err.Error(), "already recorded"):
					failed++
				case !bad && err == nil:
					good++
				default:
					t.Errorf("append %d/%d (bad=%v): err = %v", w, i, bad, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != workers*perWorker/2 || good != workers*perWorker/2 {
		t.Errorf("failed %d, good %d; want %d each", failed, good, workers*perWorker/2)
	}
	n, err := s.CountEvents(ctx, tr.ID)
	if err != nil || n != good+1 {
		t.Errorf("CountEvents = %d, %v; want %d", n, err, good+1)
	}
}

func TestCanceledWriteIsNotApplied(t *testing.T) {
	s := openTest(t)
	_, tr := newTrial(t, s)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.AppendEvent(cctx, tr.ID, logEvent("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendEvent with a canceled context: err = %v, want context.Canceled", err)
	}
	if n, _ := s.CountEvents(context.Background(), tr.ID); n != 0 {
		t.Errorf("canceled append stored %d events", n)
	}
}

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"evals.si/engine"
	"evals.si/report"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

func openStore(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.Open(context.Background(), filepath.Join(tb.TempDir(), "evalsi.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// seedTrial makes a run with one finished trial of record rec carrying the
// given task-success, n events, a diff and a checker event at the end.
func seedTrial(tb testing.TB, st *store.Store, name, rec string, success float64, n int) (store.Run, store.Trial) {
	tb.Helper()
	ctx := context.Background()
	run, err := st.CreateRun(ctx, store.RunInput{Spec: &spec.Spec{Name: name}})
	if err != nil {
		tb.Fatal(err)
	}
	tr, err := st.StartTrial(ctx, store.TrialInput{RunID: run.ID, RecordID: rec, Record: json.RawMessage(`{"id":"` + rec + `","input":"fix it"}`)})
	if err != nil {
		tb.Fatal(err)
	}
	appendEvents(tb, st, tr.ID, n)
	if _, err := st.PutArtifact(ctx, tr.ID, "diff.patch", "text/x-diff", strings.NewReader("--- a/calc.py\n+++ b/calc.py\n-    return a - b\n+    return a + b\n")); err != nil {
		tb.Fatal(err)
	}
	if err := st.PutScores(ctx, tr.ID, []store.Score{{Name: "task-success", Value: success}, {Name: "agent-steps", Value: 3}}); err != nil {
		tb.Fatal(err)
	}
	pass := success == 1
	iso := json.RawMessage(`{"rung":"bwrap","isolation":"namespaces","network":"deny"}`)
	if err := st.FinishTrial(ctx, tr.ID, store.TrialResult{Status: store.TrialFinished, Passed: &pass, Output: "done", Isolation: iso,
		Usage: trajectory.Usage{InputTokens: 100, OutputTokens: 20}, CostUSD: 0.01}); err != nil {
		tb.Fatal(err)
	}
	if err := st.FinishRun(ctx, run.ID, store.RunCompleted, json.RawMessage(`{"records":1,"trials":1,"scores":{"task-success":`+fmt.Sprint(success)+`}}`), ""); err != nil {
		tb.Fatal(err)
	}
	run, _ = st.GetRun(ctx, run.ID)
	tr, _ = st.GetTrial(ctx, tr.ID)
	return run, tr
}

// event is the i-th event (seq i+1) of a synthetic agent trajectory: a
// model call, the assistant message, a tool call and its result, repeating;
// the last is the checker's verdict.
func event(i, n int) trajectory.Event {
	e := trajectory.Event{Seq: i + 1, Step: i/4 + 1}
	switch {
	case i == n-1:
		e.Kind, e.Checker = trajectory.KindChecker, &trajectory.Checker{ExitCode: 0, Pass: true, Score: 1, Output: "3 passed"}
	case i%4 == 0:
		e.Kind, e.DurationMS = trajectory.KindModelCall, 800
		e.ModelCall = &trajectory.ModelCall{Model: "m", Usage: trajectory.Usage{InputTokens: 1200, OutputTokens: 80}, CostUSD: 0.0048}
	case i%4 == 1:
		e.Kind, e.Message = trajectory.KindMessage, &trajectory.Message{Role: trajectory.RoleAssistant, Content: "Running the tests again."}
	case i%4 == 2:
		e.Kind, e.ToolCall = trajectory.KindToolCall, &trajectory.ToolCall{ID: fmt.Sprint("c", i), Name: "bash", Arguments: json.RawMessage(`{"command":"python3 -m pytest -q"}`)}
	default:
		e.Kind, e.DurationMS = trajectory.KindToolResult, 350
		e.ToolResult = &trajectory.ToolResult{CallID: fmt.Sprint("c", i-1), Name: "bash", Output: strings.Repeat("test_calc.py::test_add PASSED\n", 12)}
	}
	return e
}

// appendEvents appends n events from 16 writers with explicit seqs, so the
// store's group commit shares fsyncs between them.
func appendEvents(tb testing.TB, st *store.Store, trialID string, n int) {
	tb.Helper()
	const writers = 16
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if err := st.AppendEvent(context.Background(), trialID, event(i, n)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		tb.Fatal(err)
	}
}

func getJSON(tb testing.TB, h http.Handler, path string, wantCode int, v any) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != wantCode {
		tb.Fatalf("GET %s: %d, want %d: %s", path, rec.Code, wantCode, rec.Body.String())
	}
	if v != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			tb.Fatalf("GET %s: %v\n%s", path, err, rec.Body.String())
		}
	}
}

func TestAPI(t *testing.T) {
	st := openStore(t)
	good, goodTrial := seedTrial(t, st, "fix-calc", "fix-calc", 1, 1203)
	bad, _ := seedTrial(t, st, "fix-calc-wrong", "fix-calc", 0, 10)
	h := New(st, nil)

	var runs struct{ Runs []runView }
	getJSON(t, h, "/api/runs", 200, &runs)
	if len(runs.Runs) != 2 {
		t.Fatalf("runs = %+v", runs.Runs)
	}
	getJSON(t, h, "/api/runs?status=bogus", 400, nil)

	var rd runDetailView
	getJSON(t, h, "/api/runs/"+good.ID, 200, &rd)
	if len(rd.Records) != 1 || rd.Records[0].Trials[0].ID != goodTrial.ID || len(rd.Isolation) != 1 || rd.Isolation[0].Trials != 1 {
		t.Errorf("run detail: %+v", rd)
	}
	getJSON(t, h, "/api/runs/r-nope", 404, nil)

	var td trialDetailView
	getJSON(t, h, "/api/trials/"+goodTrial.ID, 200, &td)
	if td.Events != 1203 || !strings.Contains(td.Diff, "+    return a + b") || td.Checker == nil || td.Checker.Output != "3 passed" {
		t.Errorf("trial detail: events %d diff %q checker %+v", td.Events, td.Diff, td.Checker)
	}

	// Paging walks every event once, in order.
	seen, after := 0, 0
	for {
		var p eventsPage
		getJSON(t, h, fmt.Sprintf("/api/trials/%s/events?after=%d&limit=500", goodTrial.ID, after), 200, &p)
		for _, e := range p.Events {
			seen++
			if e.Seq != seen {
				t.Fatalf("event seq %d, want %d", e.Seq, seen)
			}
		}
		after = p.Next
		if !p.More {
			break
		}
	}
	if seen != 1203 {
		t.Errorf("paged through %d events, want 1203", seen)
	}
	getJSON(t, h, "/api/trials/"+goodTrial.ID+"/events?limit=0", 400, nil)
	getJSON(t, h, "/api/trials/"+goodTrial.ID+"/events?after=x", 400, nil)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/trials/"+goodTrial.ID+"/artifacts/diff.patch", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") || !strings.Contains(rec.Body.String(), "return a + b") {
		t.Errorf("artifact: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
	getJSON(t, h, "/api/trials/"+goodTrial.ID+"/artifacts/nope", 404, nil)

	var c report.Comparison
	getJSON(t, h, "/api/compare?base="+good.ID+"&head="+bad.ID, 200, &c)
	if len(c.Records) != 1 || c.Records[0].Verdict != report.Regressed || c.Counts[report.Regressed] != 1 {
		t.Errorf("compare: %+v", c)
	}
	getJSON(t, h, "/api/compare?base="+good.ID, 400, nil)
	getJSON(t, h, "/api/nothing", 404, nil)

	// Pages are the embedded document; assets are served.
	for _, p := range []string{"/", "/runs/" + good.ID, "/trials/" + goodTrial.ID, "/compare?base=a&head=b", "/static/app.js", "/static/style.css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != 200 || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, rec.Code, len(body))
		}
	}
}

// BenchmarkTrial100k measures opening a trial of 100,000 events: the page,
// the trial's data and the first page of events, as the browser fetches them.
func BenchmarkTrial100k(b *testing.B) {
	const n = 100_000
	st := openStore(b)
	_, tr := seedTrial(b, st, "big", "big", 1, n)
	h := New(st, nil)
	paths := []string{"/trials/" + tr.ID, "/api/trials/" + tr.ID, "/api/trials/" + tr.ID + "/events?after=0&limit=500"}
	b.ResetTimer()
	for b.Loop() {
		for _, p := range paths {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
			if rec.Code != 200 {
				b.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body.String())
			}
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/1000, "ms/open")
	b.Logf("opening a trial of %d events (page + trial + first 500 events): %v", n, per)
}

// A diff over the inline limit is cut at a character boundary and flagged;
// the artifact endpoint still serves it whole.
func TestBigDiffIsTruncated(t *testing.T) {
	st := openStore(t)
	_, tr := seedTrial(t, st, "big-diff", "r", 1, 3)
	big := "+" + strings.Repeat("é", maxInlineDiff) // 2 bytes each: the cut lands mid-character
	if _, err := st.PutArtifact(context.Background(), tr.ID, "diff.patch", "text/x-diff", strings.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	h := New(st, nil)
	var td trialDetailView
	getJSON(t, h, "/api/trials/"+tr.ID, 200, &td)
	if !td.DiffTruncated || len(td.Diff) > maxInlineDiff || len(td.Diff) < maxInlineDiff-3 || !utf8.ValidString(td.Diff) {
		t.Errorf("truncated %v, %d bytes, valid UTF-8 %v", td.DiffTruncated, len(td.Diff), utf8.ValidString(td.Diff))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/trials/"+tr.ID+"/artifacts/diff.patch", nil))
	if rec.Body.Len() != len(big) {
		t.Errorf("artifact served %d bytes, want %d", rec.Body.Len(), len(big))
	}
}

// A run its budget stopped reads as the CLI says it: why, and how many
// trials wait; a resume (a new status) supersedes it.
func TestRunViewBudgetStopped(t *testing.T) {
	sum := &engine.Summary{Status: engine.StatusInterrupted, Records: 2, Trials: 2, NotStarted: 3, Stopped: "budget $0.50 reached"}
	if v := newRunView(store.Run{ID: "r", Status: engine.StatusInterrupted}, sum); v.Label != "stopped: budget $0.50 reached, 3 trials not started" {
		t.Errorf("label %q", v.Label)
	}
	if v := newRunView(store.Run{ID: "r", Status: engine.StatusRunning}, sum); v.Label != engine.StatusRunning {
		t.Errorf("label of the resumed run %q, want running", v.Label)
	}
}

package remoteworker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"evals.si/access"
	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/internal/testenv/pgtest"
	"evals.si/planner"
	"evals.si/remoteworker"
	"evals.si/server"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	editorToken = "cancel-editor-token-0123456789"
	workerToken = "cancel-worker-token-0123456789"
	modelKey    = "sk-cancel-test-key-0123456789"
)

func sum256(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

// TestCancelStopsTheWorkersTrial runs a real server (over SQLite, and over
// PostgreSQL) and a real remote worker in this process. The worker's trial
// blocks in its model call (a model endpoint that answers only when the
// caller goes away) while a second trial waits; cancelling the run through
// the API must stop the worker's trial (the model call's context ends),
// leave the waiting trial never leased, end the run cancelled with nothing
// failed or errored, and the worker must send nothing more of the trial
// after the server told it (one refused heartbeat, no events, no finish).
func TestCancelStopsTheWorkersTrial(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) server.Store
	}{
		{"sqlite", func(t *testing.T) server.Store {
			st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "evalsi.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) server.Store {
			dsn := pgtest.Start(t)
			blobs, err := store.OpenFSBlobs(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			st, err := postgres.Open(t.Context(), dsn, blobs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { cancelWithWorker(t, b.open(t)) })
	}
}

func cancelWithWorker(t *testing.T, st server.Store) {
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// The model: it answers no call; it says when one starts and when its
	// caller gave up on it.
	started, stopped := make(chan string, 8), make(chan string, 8)
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		started <- string(body)
		select {
		case <-r.Context().Done():
			stopped <- string(body)
		case <-time.After(2 * time.Minute):
			http.Error(w, "the test's model waited two minutes for its caller to go away", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(llm.Close)

	acc, err := access.New(access.Config{
		Projects: []access.Project{{Name: "alpha", Members: []access.Member{{User: "ana", Role: access.RoleEditor}}}},
		Tokens: []access.Token{
			{Name: "ana-cli", User: "ana", Project: "alpha", SHA256: sum256(editorToken)},
			{Name: "worker", Service: "worker", SHA256: sum256(workerToken)},
		},
		Credentials: access.Credentials{Grants: map[string][]string{"alpha": {"MODEL_KEY"}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, Access: acc, Records: &planner.Host{Logger: logger},
		DatasetsDir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	calls := &workerCalls{}
	hs := httptest.NewServer(calls.wrap(srv))
	t.Cleanup(hs.Close)

	editor, err := apiclient.New(hs.URL, editorToken)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse("blocked.yaml", []byte(fmt.Sprintf(`
name: blocked
target: {connector: openai, model: m, base_url: %q, api_key_env: MODEL_KEY}
evaluators: [exact-match]
dataset:
  records:
    - {id: first, input: "first question", expected: "yes"}
    - {id: second, input: "second question", expected: "yes"}
`, llm.URL+"/v1")))
	if err != nil {
		t.Fatal(err)
	}
	run, err := editor.Submit(ctx, "blocked.yaml", f.Spec, "alpha")
	if err != nil {
		t.Fatal(err)
	}

	wc, err := apiclient.New(hs.URL, workerToken)
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "MODEL_KEY" {
			return modelKey
		}
		return ""
	}
	metrics := remoteworker.NewMetrics()
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- remoteworker.Run(wctx, remoteworker.Options{Client: wc, Host: &planner.Host{Logger: logger, Getenv: getenv},
			Name: "w1", Slots: 1, TTL: 3 * time.Second, Poll: 100 * time.Millisecond, Dir: t.TempDir(), Logger: logger,
			Getenv: getenv, Metrics: metrics})
	}()

	select {
	case body := <-started:
		if !strings.Contains(body, "first question") {
			t.Fatalf("the first model call asks %s; want the first record", body)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker made no model call within 60s")
	}
	if r, err := editor.Run(ctx, run.ID); err != nil || r.Counts[store.TrialRunning] != 1 || r.Counts[store.TrialPending] != 1 {
		t.Fatalf("before the cancel: %+v, %v; want one trial running, one pending", r, err)
	}

	cancelledAt := time.Now()
	got, err := editor.Cancel(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != api.RunCancelled {
		t.Fatalf("cancel answered %+v; want the run cancelled", got)
	}
	// No timing is asserted beyond a bound on a hang: the worker hears of
	// the cancel at its next heartbeat (a second, with a 3s lease).
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker's trial was still in its model call 60s after the cancel")
	}
	stopWorker()
	select {
	case err := <-workerDone:
		if err != nil {
			t.Fatalf("the worker: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not stop within 60s")
	}
	select {
	case body := <-started:
		t.Errorf("a model call after the cancel: %s", body)
	default:
	}

	final, err := editor.Run(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != api.RunCancelled || len(final.Counts) != 1 || final.Counts[store.TrialCancelled] != 2 {
		t.Errorf("the run after the cancel: %s, counts %v; want cancelled, both trials cancelled", final.Status, final.Counts)
	}
	if s := final.Summary; s == nil || s.Status != api.RunCancelled || s.Errored != 0 || len(s.ErrorsByKind) != 0 || s.Records != 2 {
		t.Errorf("summary %+v; want cancelled over 2 records, nothing errored", s)
	}
	trials, err := editor.Trials(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trials.Trials {
		if tr.Status != store.TrialCancelled || tr.ErrorKind != "" || tr.Passed != nil {
			t.Errorf("trial %s: %s %q; want cancelled with no error or verdict", tr.RecordID, tr.Status, tr.ErrorKind)
		}
		if tr.RecordID == "second" && !tr.StartedAt.IsZero() {
			t.Errorf("the waiting trial started at %v; want it never leased", tr.StartedAt)
		}
	}

	// What the worker sent of its trials: heartbeats and events, until
	// the one write refused after the cancel (a heartbeat, or an event
	// batch on its way when the cancel came), then nothing; never a
	// finish.
	var after []workerCall
	for _, c := range calls.all() {
		if c.op == "finish" {
			t.Errorf("the worker finished trial %s (%d)", c.trial, c.status)
		}
		if c.at.After(cancelledAt) {
			after = append(after, c)
		}
	}
	refused := 0
	for i, c := range after {
		if c.status >= 300 && c.status != http.StatusConflict {
			t.Errorf("after the cancel the worker's %s of trial %s was answered %d", c.op, c.trial, c.status)
		}
		if c.status == http.StatusConflict {
			refused++
			if c.reason != api.ReasonCancelled {
				t.Errorf("the refused heartbeat's reason is %q, want %q", c.reason, api.ReasonCancelled)
			}
			if i != len(after)-1 {
				t.Errorf("the worker kept writing after it was told: %+v", after[i+1:])
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d refused writes after the cancel (%+v); want exactly one", refused, after)
	}

	for _, c := range []struct {
		metric, label string
		want          float64
	}{
		{"evalsid_worker_trials_cancelled_total", "", 1},
		{"evalsid_worker_lease_losses_total", "", 0},
		{"evalsid_worker_trials_finished_total", "completed", 0},
		{"evalsid_worker_trials_finished_total", "errored", 0},
		{"evalsid_worker_trials_running", "", 0},
	} {
		if v := metricValue(t, metrics, logger, c.metric, c.label); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.metric, c.label, v, c.want)
		}
	}
}

// workerCalls records the worker's writes to its trials as the server
// answered them.
type workerCalls struct {
	mu    sync.Mutex
	calls []workerCall
}

type workerCall struct {
	trial, op string
	status    int
	reason    string
	at        time.Time
}

var trialWrite = regexp.MustCompile(`^/v1/worker/trials/([^/]+)/(heartbeat|events|finish)$`)

func (w *workerCalls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		m := trialWrite.FindStringSubmatch(r.URL.Path)
		if m == nil {
			next.ServeHTTP(rw, r)
			return
		}
		rec := &answer{ResponseWriter: rw}
		next.ServeHTTP(rec, r)
		var e api.Error
		_ = json.Unmarshal(rec.body.Bytes(), &e)
		w.mu.Lock()
		defer w.mu.Unlock()
		// The time the answer went out: a write answered after the
		// cancel began may have been sent before it, never after.
		w.calls = append(w.calls, workerCall{trial: m[1], op: m[2], status: rec.status, reason: e.Error.Reason, at: time.Now()})
	})
}

func (w *workerCalls) all() []workerCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]workerCall(nil), w.calls...)
}

type answer struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (a *answer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	a.body.Write(b)
	return a.ResponseWriter.Write(b)
}

// metricValue reads one counter or gauge from the worker's /metrics as
// Prometheus parses it.
func metricValue(t *testing.T, m *remoteworker.Metrics, log *slog.Logger, name, label string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler(log).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if rec.Code != http.StatusOK || err != nil {
		t.Fatalf("/metrics: %d %v\n%s", rec.Code, err, rec.Body)
	}
	for _, mt := range fams[name].GetMetric() {
		if label != "" && (len(mt.GetLabel()) != 1 || mt.GetLabel()[0].GetValue() != label) {
			continue
		}
		return mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
	}
	t.Fatalf("no %s{%s} in\n%s", name, label, rec.Body)
	return 0
}

// testLog sends log lines to t.Log while the test runs.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/internal/testenv/servertest"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/postgres"
)

// These tests run the real binaries: `evalsid serve` on a PostgreSQL of
// the test's own, two `evalsid worker` processes, and a scripted model
// server (OpenAI wire format) behind a gate the test closes to hold
// trials in flight while it kills a process.

// gate holds model requests while closed.
type gate struct {
	next     http.Handler
	mu       sync.Mutex
	open     chan struct{}
	served   atomic.Int64
	held     atomic.Int64
	closeAt  int64 // close the gate after this many requests (0: never)
	closedCh chan struct{}
	once     sync.Once
}

func newGate(next http.Handler, closeAt int64) *gate {
	return &gate{next: next, open: make(chan struct{}), closeAt: closeAt, closedCh: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := g.served.Add(1)
	if g.closeAt > 0 && n > g.closeAt {
		g.once.Do(func() { close(g.closedCh) })
		g.held.Add(1)
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-r.Context().Done():
			g.held.Add(-1)
			return
		}
		g.held.Add(-1)
	}
	g.next.ServeHTTP(w, r)
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// waitHeld waits until at least n requests are held at the closed gate.
func (g *gate) waitHeld(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for g.held.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests reached the closed gate (%d served); want %d", g.held.Load(), g.served.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const (
	anaToken    = "tok-ana-e2e-0123456789"
	workerToken = "tok-worker-e2e-0123456789"
	modelKey    = "sk-e2e-model-key-never-stored"
)

// manySpec is a plain model run of records × trials trivial trials
// against the scripted model at base.
func manySpec(base string, records, trials int) *spec.Spec {
	var b strings.Builder
	fmt.Fprintf(&b, "name: many\ntrials: %d\nconcurrency: 8\nretries: 1\n", trials)
	fmt.Fprintf(&b, "target: {connector: openai, model: m, base_url: %q, api_key_env: E2E_MODEL_KEY}\n", base+"/v1")
	b.WriteString("evaluators: [exact-match]\ndataset:\n  records:\n")
	for i := range records {
		want := "yes"
		if i%3 == 0 {
			want = "no"
		}
		fmt.Fprintf(&b, "    - {id: r%03d, input: \"question %d\", expected: %s}\n", i, i, want)
	}
	f, err := spec.Parse("many.yaml", []byte(b.String()))
	if err != nil {
		panic(err)
	}
	return f.Spec
}

func modelBackend(t *testing.T, closeAt int64) (*gate, string) {
	t.Helper()
	ms := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "yes", InputTokens: 7, OutputTokens: 1}}}, nil)
	g := newGate(ms, closeAt)
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.release(); srv.Close() })
	return g, srv.URL
}

// serverSetup is `evalsid serve` on PostgreSQL with project alpha, its
// editor ana, a worker token and the model key granted.
type serverSetup struct {
	*servertest.Server
}

func newServerSetup(t *testing.T) *serverSetup {
	t.Helper()
	return &serverSetup{servertest.New(t, servertest.Options{
		Config: `leases: {ttl: 2s, max_ttl: 2s, sweep: 300ms}
projects:
  - name: alpha
    members: [{user: ana, role: editor}]
tokens:
  - {name: ana, user: ana, project: alpha, token_env: E2E_ANA_TOKEN}
  - {name: w, service: worker, token_env: E2E_WORKER_TOKEN}
credentials:
  grants: {alpha: [E2E_MODEL_KEY]}
`,
		Env: []string{"E2E_ANA_TOKEN=" + anaToken, "E2E_WORKER_TOKEN=" + workerToken},
	})}
}

func (s *serverSetup) worker(t *testing.T, name string) *servertest.Proc {
	t.Helper()
	return s.Worker(t, name, 4, "EVALSI_TOKEN="+workerToken, "E2E_MODEL_KEY="+modelKey)
}

func (s *serverSetup) client(t *testing.T) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(s.URL, anaToken)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func follow(t *testing.T, c *apiclient.Client, runID string) *engine.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := c.Follow(ctx, runID, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("following run %s: %v (last state %+v)", runID, err, run)
	}
	if run.Status != engine.StatusCompleted || run.Summary == nil {
		t.Fatalf("run %s ended %s: %s", runID, run.Status, run.Error)
	}
	return run.Summary
}

// embeddedSummary runs the same spec embedded, for comparison.
func embeddedSummary(t *testing.T, s *spec.Spec) *engine.Summary {
	t.Helper()
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(t.TempDir(), "e.db"),
		Getenv: func(k string) string {
			if k == "E2E_MODEL_KEY" {
				return modelKey
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sum, err := app.Run(ctx, &spec.File{Spec: s, Path: "many.yaml"}, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// sameSummary compares what a run measured (not its id, timing, or how
// many attempts workers lost on the way).
func sameSummary(t *testing.T, got, want *engine.Summary) {
	t.Helper()
	if got.Records != want.Records || got.Trials != want.Trials || got.Errored != want.Errored ||
		got.Tokens != want.Tokens || got.CostUSD != want.CostUSD || got.TokensInclRetries != want.TokensInclRetries {
		t.Errorf("server summary %+v\nembedded summary %+v", got, want)
	}
	if fmt.Sprint(got.Scores) != fmt.Sprint(want.Scores) {
		t.Errorf("server scores %v, embedded %v", got.Scores, want.Scores)
	}
}

// checkAttempts: every trial finished exactly once; lost attempts only
// where a worker died.
func checkAttempts(t *testing.T, dsn, runID string, want int) (lost int) {
	t.Helper()
	ctx := context.Background()
	blobs, err := store.OpenFSBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(ctx, dsn, blobs)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	attempts, err := st.ListAttempts(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	// An errored attempt may be retried (a worker cut off from the
	// server errs and retries); a trial is finished by exactly one attempt,
	// its last.
	finished, last := map[string]int{}, map[string]store.Trial{}
	for _, a := range attempts {
		k := fmt.Sprintf("%s#%d", a.RecordID, a.Trial)
		if a.Attempt > last[k].Attempt {
			last[k] = a
		}
		switch a.Status {
		case store.TrialFinished:
			finished[k]++
		case store.TrialErrored:
		case store.TrialLost:
			lost++
		default:
			t.Errorf("attempt %s of %s is still %s", a.ID, k, a.Status)
		}
	}
	if len(last) != want {
		t.Errorf("%d trials, want %d", len(last), want)
	}
	for k, a := range last {
		if n := finished[k]; n > 1 || (n == 1) != (a.Status == store.TrialFinished) {
			t.Errorf("trial %s: %d finished attempts, the last one %s", k, n, a.Status)
		}
	}
	return lost
}

// A 200-trial run through the server and two workers, one of them killed
// with SIGKILL while it holds trials: no trial is lost, none finishes
// twice, and the summary is the embedded run's.
func TestServerWorkerKilled(t *testing.T) {
	g, model := modelBackend(t, 60)
	s := newServerSetup(t)
	s.Serve(t)
	a := s.worker(t, "worker-a")
	s.worker(t, "worker-b")
	sp := manySpec(model, 50, 4)
	c := s.client(t)
	run, err := c.Submit(context.Background(), "many.yaml", sp, "")
	if err != nil {
		t.Fatal(err)
	}
	// Both workers' slots fill up at the closed gate; then one dies.
	g.waitHeld(t, 6)
	a.Kill()
	g.release()
	sum := follow(t, c, run.ID)
	if lost := checkAttempts(t, s.DSN, run.ID, 200); lost == 0 {
		t.Errorf("no attempt was lost, so the killed worker held none: the test proved nothing")
	}
	_, model2 := modelBackend(t, 0)
	sameSummary(t, sum, embeddedSummary(t, manySpec(model2, 50, 4)))
}

// The server killed with SIGKILL mid-run and started again: the workers
// carry on and the run completes.
func TestServerRestarted(t *testing.T) {
	g, model := modelBackend(t, 40)
	s := newServerSetup(t)
	srv := s.Serve(t)
	s.worker(t, "worker-a")
	s.worker(t, "worker-b")
	c := s.client(t)
	run, err := c.Submit(context.Background(), "many.yaml", manySpec(model, 50, 4), "")
	if err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t, 4)
	srv.Kill()
	g.release()
	time.Sleep(500 * time.Millisecond)
	s.Serve(t)
	follow(t, c, run.ID)
	checkAttempts(t, s.DSN, run.ID, 200)
}

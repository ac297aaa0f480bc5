package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/internal/testenv/pgtest"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/postgres"
)

// These tests run the real binaries: `evalsid serve` on a PostgreSQL of
// the test's own, two `evalsid worker` processes, and a scripted model
// server (OpenAI wire format) behind a gate the test closes to hold
// trials in flight while it kills a process.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// evalsidBinary builds this command once per test binary.
func evalsidBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "evalsid-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "evalsid")
		cmd := exec.Command("go", "build", "-o", builtBin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building evalsid: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

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

// serverSetup is a server config on a fixed loopback port (so a restarted
// server is found where the workers look).
type serverSetup struct {
	bin, dir, cfg, url, dsn string
}

func newServerSetup(t *testing.T) *serverSetup {
	t.Helper()
	dsn := pgtest.Start(t)
	bin := evalsidBinary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "server.yaml")
	body := fmt.Sprintf(`listen: %s
store: {postgres_env: E2E_PG_DSN}
blobs_dir: blobs
datasets_dir: datasets
leases: {ttl: 2s, max_ttl: 2s, sweep: 300ms}
projects:
  - name: alpha
    members: [{user: ana, role: editor}]
tokens:
  - {name: ana, user: ana, project: alpha, token_env: E2E_ANA_TOKEN}
  - {name: w, service: worker, token_env: E2E_WORKER_TOKEN}
credentials:
  grants: {alpha: [E2E_MODEL_KEY]}
`, addr)
	if err := os.MkdirAll(filepath.Join(dir, "datasets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return &serverSetup{bin: bin, dir: dir, cfg: cfg, url: "http://" + addr, dsn: dsn}
}

// proc is a started evalsid process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (s *serverSetup) start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "E2E_PG_DSN="+s.dsn, "E2E_ANA_TOKEN="+anaToken, "E2E_WORKER_TOKEN="+workerToken)
	if strings.HasPrefix(name, "worker") {
		cmd.Env = append(cmd.Env, "EVALSI_TOKEN="+workerToken, "E2E_MODEL_KEY="+modelKey)
	}
	logf, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
			t.Logf("%s log:\n%s", name, tail(string(b), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (s *serverSetup) serve(t *testing.T) *proc {
	t.Helper()
	p := s.start(t, "server", "serve", "--config", s.cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Fatalf("the server did not come up: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *serverSetup) worker(t *testing.T, name string) *proc {
	t.Helper()
	return s.start(t, name, "worker", "--server", s.url, "--name", name, "--slots", "4", "--state-dir", filepath.Join(s.dir, name+"-state"))
}

func (s *serverSetup) client(t *testing.T) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(s.url, anaToken)
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
	s.serve(t)
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
	a.kill(t)
	g.release()
	sum := follow(t, c, run.ID)
	if lost := checkAttempts(t, s.dsn, run.ID, 200); lost == 0 {
		t.Errorf("no attempt was lost, so the killed worker held none: the test proved nothing")
	}
	g2, model2 := modelBackend(t, 0)
	_ = g2
	sameSummary(t, sum, embeddedSummary(t, manySpec(model2, 50, 4)))
}

// The server killed with SIGKILL mid-run and started again: the workers
// carry on and the run completes.
func TestServerRestarted(t *testing.T) {
	g, model := modelBackend(t, 40)
	s := newServerSetup(t)
	srv := s.serve(t)
	s.worker(t, "worker-a")
	s.worker(t, "worker-b")
	c := s.client(t)
	run, err := c.Submit(context.Background(), "many.yaml", manySpec(model, 50, 4), "")
	if err != nil {
		t.Fatal(err)
	}
	g.waitHeld(t, 4)
	srv.kill(t)
	g.release()
	time.Sleep(500 * time.Millisecond)
	s.serve(t)
	follow(t, c, run.ID)
	checkAttempts(t, s.dsn, run.ID, 200)
}

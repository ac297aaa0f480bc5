package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"evals.si/apiclient"
	"evals.si/dataset"
	"evals.si/internal/testenv/servertest"
	"evals.si/modelserver"
	"evals.si/spec"
)

// These tests run the CLI in process against a real `evalsid serve` on a
// PostgreSQL of the test's own, with one real `evalsid worker` process, as
// cmd/evalsid's tests start them.

const (
	editorToken = "tok-ana-cli-0123456789"
	viewerToken = "tok-vic-cli-0123456789"
	workerTok   = "tok-worker-cli-0123456789"
	gateKey     = "sk-cli-model-key-never-stored"
)

// testServer is a running `evalsid serve` with one worker.
type testServer struct {
	url, dir, datasets string
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	srv := servertest.New(t, servertest.Options{
		Config: `leases: {ttl: 5s, sweep: 500ms}
projects:
  - name: alpha
    members: [{user: ana, role: editor}, {user: vic, role: viewer}]
tokens:
  - {name: ana, user: ana, project: alpha, token_env: CLI_ANA_TOKEN}
  - {name: vic, user: vic, project: alpha, token_env: CLI_VIC_TOKEN}
  - {name: w, service: worker, token_env: CLI_WORKER_TOKEN}
credentials:
  grants: {alpha: [CLI_MODEL_KEY]}
`,
		Env: []string{"CLI_ANA_TOKEN=" + editorToken, "CLI_VIC_TOKEN=" + viewerToken, "CLI_WORKER_TOKEN=" + workerTok},
	})
	srv.Serve(t)
	srv.Worker(t, "w1", 4, "EVALSI_TOKEN="+workerTok, "CLI_MODEL_KEY="+gateKey)
	return &testServer{url: srv.URL, dir: srv.Dir, datasets: srv.Datasets}
}

// cli runs evalsi in process with args as given.
func cli(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// jsonKeys are the top-level keys of one JSON object.
func jsonKeys(t *testing.T, s string) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, s)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestServerCLI: `evalsi run --server --json` of capitals-offline prints the
// embedded run's JSON keys and scores; runs list/show/compare/export, view
// and promote read and write the run through the API; a viewer's token
// gets the server's refusal of promote.
func TestServerCLI(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	// The token from the config file, by server URL (EVALSI_TOKEN unset).
	cfgHome := t.TempDir()
	t.Setenv("EVALSI_TOKEN", "")
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	if err := os.MkdirAll(filepath.Join(cfgHome, "evalsi"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("servers:\n  %q: {token: %s}\n", s.url, editorToken)
	if err := os.WriteFile(filepath.Join(cfgHome, "evalsi", "config.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	emb := evalsi(t, filepath.Join(t.TempDir(), "e.db"), "run", "-f", "../../examples/capitals-offline.yaml", "--json")
	srv := cli(ctx, "run", "-f", "../../examples/capitals-offline.yaml", "--server", s.url, "--json")
	if srv.code != 0 || emb.code != 0 {
		t.Fatalf("run --server: exit %d (embedded %d)\n%s%s", srv.code, emb.code, srv.stdout, srv.stderr)
	}
	if got, want := jsonKeys(t, srv.stdout), jsonKeys(t, emb.stdout); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("--server --json keys %v, embedded %v", got, want)
	}
	var got result
	if err := json.Unmarshal([]byte(srv.stdout), &got.json); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.json.Scores) != fmt.Sprint(emb.json.Scores) || got.json.Records != 4 || got.json.Trials != 1 || got.json.Errored != 0 || got.json.Status != "completed" {
		t.Errorf("--server summary %+v, embedded %+v", got.json, emb.json)
	}
	id := got.json.RunID

	// Text mode: the embedded progress lines and summary table.
	junit := filepath.Join(t.TempDir(), "junit.xml")
	txt := cli(ctx, "run", "-f", "../../examples/capitals-offline.yaml", "--server", s.url, "--fail-under", "exact-match=0.9", "--junit", junit)
	if txt.code != exitFailUnder || !strings.Contains(txt.stdout, "[4/4] ") || !strings.Contains(txt.stdout, "trial 0: completed") ||
		!strings.Contains(txt.stdout, "EVALUATOR") || !strings.Contains(txt.stderr, "below threshold: exact-match=0.500 < 0.900") {
		t.Errorf("run --server --fail-under: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", txt.code, txt.stdout, txt.stderr)
	}

	if b, err := os.ReadFile(junit); err != nil || !strings.Contains(string(b), `tests="4" failures="2" errors="0"`) || !strings.Contains(string(b), `name="kenya [trial 0]"`) {
		t.Errorf("--junit with --server: %v\n%s", err, b)
	}
	if r := cli(ctx, "runs", "list", "--server", s.url); r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "exact-match=0.5") {
		t.Errorf("runs list --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := cli(ctx, "runs", "list", "--json", "--server", s.url); r.code != 0 || !strings.Contains(r.stdout, `"run_id":"`+id+`"`) {
		t.Errorf("runs list --server --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The run by a prefix, the flag after it.
	r := cli(ctx, "runs", "show", id[:len(id)-2], "--server", s.url)
	if r.code != 0 || !strings.Contains(r.stdout, "run "+id) {
		t.Errorf("runs show --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"france", "peru", "exact-match=1 includes=1", "exact-match=0 includes=1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("runs show --server lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := cli(ctx, "runs", "show", "r-nope", "--server", s.url); r.code != exitUsage || !strings.Contains(r.stderr, "no run r-nope") {
		t.Errorf("runs show of a missing run: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cli(ctx, "runs", "compare", id, id, "--json", "--server", s.url); r.code != 0 || !strings.Contains(r.stdout, `"unchanged":4`) {
		t.Errorf("runs compare --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := cli(ctx, "runs", "export", id, "--server", s.url); r.code != 0 || strings.Count(r.stdout, "\n") != 4 || !strings.Contains(r.stdout, `"record":{"id":"france"`) {
		t.Errorf("runs export --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Parquet from the server's export: records and events included.
	pq := filepath.Join(t.TempDir(), "run.parquet")
	if r := cli(ctx, "runs", "export", id, "--format", "parquet", "-o", pq, "--server", s.url); r.code != 0 {
		t.Errorf("runs export --format parquet --server: exit %d\n%s", r.code, r.stderr)
	} else if rows, err := parquet.ReadFile[parquetScoreRow](pq); err != nil || len(rows) != 4 || !strings.Contains(rows[0].Record, `"id":"france"`) ||
		!strings.Contains(rows[0].Events, `"seq":1`) || rows[0].ExactMatch == nil || *rows[0].ExactMatch != 1 {
		t.Errorf("parquet rows %+v (%v)", rows, err)
	}
	if r := cli(ctx, "view", "--server", s.url, id[:len(id)-2]); r.code != 0 || !strings.Contains(r.stdout, s.url+"/runs/"+id+"\n") || !strings.Contains(r.stdout, s.url+"/login") {
		t.Errorf("view --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Promote twice: the failures once, then nothing.
	when := `scores["exact-match"] < 1.0`
	file := filepath.Join(s.datasets, "promoted", "alpha", "capital-fails.jsonl")
	if r := cli(ctx, "promote", id, "--dataset", "capital-fails", "--when", when, "--server", s.url); r.code != 0 || !strings.Contains(r.stdout, "promoted 2 record(s)") {
		t.Fatalf("promote --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	recs, err := dataset.ReadFile(file)
	if err != nil || len(recs) != 2 || !strings.HasPrefix(recs[0].ID, id+"/") {
		t.Fatalf("promoted file: %v, %+v", err, recs)
	}
	if r := cli(ctx, "promote", "--dataset", "capital-fails", "--when", when, id, "--server", s.url); r.code != 0 || !strings.Contains(r.stdout, "promoted 0 record(s)") || !strings.Contains(r.stdout, "(2 already there)") {
		t.Errorf("promote --server again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if again, err := dataset.ReadFile(file); err != nil || len(again) != 2 {
		t.Errorf("promoting again changed the file: %v, %d records", err, len(again))
	}
	// A viewer may read but not write datasets: the server's 403.
	t.Setenv("EVALSI_TOKEN", viewerToken)
	if r := cli(ctx, "runs", "show", id, "--server", s.url); r.code != 0 {
		t.Errorf("runs show with a viewer's token: exit %d\n%s", r.code, r.stderr)
	}
	r = cli(ctx, "promote", id, "--dataset", "viewer-made", "--when", "true", "--server", s.url)
	if r.code != exitUsage || !strings.Contains(r.stderr, "403 forbidden") || !strings.Contains(r.stderr, "datasets.write") {
		t.Errorf("promote with a viewer's token: exit %d, stderr %q; want 2 and the server's 403 naming datasets.write", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(s.datasets, "promoted", "alpha", "viewer-made.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a refused promote created its dataset: %v", err)
	}
}

// TestServerRunLocalFiles: a spec whose script and dataset are files beside
// it runs on a server whose worker cannot see them: the CLI sends both
// inline (and says so with -v); a dataset.path not on this machine is left
// to the server, which does not have it either: exit 2.
func TestServerRunLocalFiles(t *testing.T) {
	s := startServer(t)
	t.Setenv("EVALSI_TOKEN", editorToken)
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("script.yaml", "records:\n  a: [{content: \"yes\"}]\n  b: [{content: \"no\"}]\n")
	write("data.jsonl", `{"id": "a", "input": "q a", "expected": "yes"}`+"\n"+`{"id": "b", "input": "q b", "expected": "yes"}`+"\n")
	write("local.yaml", "name: local-files\ndataset: {path: data.jsonl}\ntarget: {connector: scripted, model: m, script_file: script.yaml}\nevaluators: [exact-match]\n")
	write("remote.yaml", "name: remote-path\ndataset: {path: not-here.jsonl}\ntarget: {connector: scripted, model: m, script_file: script.yaml}\n")

	r := cli(context.Background(), "run", "-f", filepath.Join(dir, "local.yaml"), "--server", s.url, "--json", "-v")
	if r.code != 0 {
		t.Fatalf("run --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var sum struct {
		Records int                `json:"records"`
		Scores  map[string]float64 `json:"scores"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Records != 2 || sum.Scores["exact-match"] != 0.5 {
		t.Errorf("summary %+v (%v)\n%s", sum, err, r.stdout)
	}
	for _, want := range []string{"sending the script inline", "its records are sent inline"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("-v does not say %q:\n%s", want, r.stderr)
		}
	}
	r = cli(context.Background(), "run", "-f", filepath.Join(dir, "remote.yaml"), "--server", s.url, "-v")
	if r.code != exitUsage || !strings.Contains(r.stderr, "the server resolves it against its datasets_dir") || !strings.Contains(r.stderr, "not-here.jsonl") {
		t.Errorf("a dataset.path on neither machine: exit %d, want 2\n%s", r.code, r.stderr)
	}
}

// TestServerRunDetach: interrupting `evalsi run --server` while trials are
// held in flight detaches (exit 130, the run named) and the run completes
// on the server.
func TestServerRunDetach(t *testing.T) {
	held := make(chan struct{}, 16)
	release := make(chan struct{})
	ms := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "yes"}}}, nil)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		ms.ServeHTTP(w, r)
	}))
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { open(); model.Close() })

	s := startServer(t)
	t.Setenv("EVALSI_TOKEN", editorToken)
	specPath := filepath.Join(t.TempDir(), "held.yaml")
	body := fmt.Sprintf("name: held\ndataset:\n  records:\n    - {id: a, input: q, expected: \"yes\"}\n    - {id: b, input: q, expected: \"yes\"}\n"+
		"target: {connector: openai, model: m, base_url: %q, api_key_env: CLI_MODEL_KEY}\nevaluators: [exact-match]\n", model.URL+"/v1")
	if err := os.WriteFile(specPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &notifyWriter{want: "submitted to", seen: make(chan struct{})}
	go func() {
		// Interrupted once the run is submitted and a trial is in flight
		// on the worker.
		for _, ch := range []<-chan struct{}{stderr.seen, held} {
			select {
			case <-ch:
			case <-time.After(2 * time.Minute):
			}
		}
		cancel()
	}()
	var stdout bytes.Buffer
	r := result{code: run(ctx, []string{"run", "-f", specPath, "--server", s.url, "--json"}, &stdout, stderr)}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	if r.code != 130 || !strings.Contains(r.stderr, "detached from run") || !strings.Contains(r.stderr, "continues on the server") {
		t.Fatalf("interrupted run --server: exit %d, want 130\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("a detached --json run printed %q on stdout", r.stdout)
	}
	_, rest, _ := strings.Cut(r.stderr, "detached from run ")
	id, _, _ := strings.Cut(rest, ";")
	open()
	c, err := apiclient.New(s.url, editorToken)
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer fcancel()
	run, err := c.Follow(fctx, id, 100*time.Millisecond, nil)
	if err != nil || run.Status != "completed" || run.Summary == nil || run.Summary.Scores["exact-match"] != 1 {
		t.Fatalf("run %s after detaching: %v, %+v", id, err, run)
	}
}

// TestServerUsageErrors: what --server refuses, before reaching a server:
// no token (saying where to put one), --resume, --store.
func TestServerUsageErrors(t *testing.T) {
	cfgHome := t.TempDir()
	t.Setenv("EVALSI_TOKEN", "")
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	url := "http://127.0.0.1:9" // nothing is reached: each refusal comes first
	conf := filepath.Join(cfgHome, "evalsi", "config.yaml")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "-f", "../../examples/capitals-offline.yaml", "--server", url}, []string{"no API token", "EVALSI_TOKEN", conf}},
		{[]string{"runs", "list", "--server", url}, []string{"no API token", conf}},
		{[]string{"runs", "show", "r-x", "--server", url}, []string{"no API token"}},
		{[]string{"promote", "r-x", "--dataset", "d", "--when", "true", "--server", url}, []string{"no API token"}},
		{[]string{"view", "--server", url, "r-x"}, []string{"no API token"}},
		{[]string{"run", "--resume", "r-x", "--server", url}, []string{"--resume with --server"}},
		{[]string{"runs", "resume", "r-x", "--server", url}, []string{"runs resume with --server"}},
		{[]string{"run", "-f", "../../examples/capitals-offline.yaml", "--store", "x.db", "--server", url}, []string{"--store", "cannot be used with --server"}},
		{[]string{"runs", "list", "--store", "x.db", "--server", url}, []string{"cannot be used with --server"}},
		{[]string{"run", "-f", "../../examples/capitals-offline.yaml", "--project", "p"}, []string{"--project names a project on a server"}},
		{[]string{"run", "-f", "no-such.yaml", "--server", url}, []string{"no-such.yaml"}},
	} {
		r := cli(context.Background(), c.args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", c.args, r.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", c.args, r.stderr, w)
			}
		}
	}
}

// notifyWriter collects what is written and closes seen once want was.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// parquetScoreRow reads an export's record, events and its exact-match
// score column (each score is a DOUBLE column of its own).
type parquetScoreRow struct {
	Record     string   `parquet:"record_json"`
	Events     string   `parquet:"events_json"`
	ExactMatch *float64 `parquet:"exact-match,optional"`
}

package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/access"
	"evals.si/api"
	"evals.si/evaluate"
	"evals.si/planner"
	"evals.si/regress"
	"evals.si/server"
	"evals.si/store"
)

// These tests run the server in-process over a real SQLite store and a
// real access config: two projects (alpha, beta), user tokens of each, a
// viewer, two worker service tokens, grants, a trusted MCP command and the
// CEL rule that refuses agent runs with network: allow.

const (
	alphaEditor = "alpha-editor-token-0123456789"
	alphaViewer = "alpha-viewer-token-0123456789"
	betaEditor  = "beta-editor-token-0123456789"
	workerTok   = "worker-one-token-0123456789"
	worker2Tok  = "worker-two-token-0123456789"
	betaWorker  = "worker-beta-token-0123456789"

	// betaSecret marks every name and content of project beta: no
	// response to alpha may contain it.
	betaSecret = "BETASECRET"
)

func digest(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}

func accessConfig() access.Config {
	return access.Config{
		Projects: []access.Project{
			{Name: "alpha", Members: []access.Member{{User: "ana", Role: access.RoleEditor}, {User: "bo", Role: access.RoleViewer}}},
			{Name: "beta", Members: []access.Member{{User: "cy", Role: access.RoleEditor}}},
		},
		Tokens: []access.Token{
			{Name: "ana-cli", User: "ana", Project: "alpha", SHA256: digest(alphaEditor)},
			{Name: "bo-cli", User: "bo", Project: "alpha", SHA256: digest(alphaViewer)},
			{Name: "cy-cli", User: "cy", Project: "beta", SHA256: digest(betaEditor)},
			{Name: "worker-1", Service: "worker", SHA256: digest(workerTok)},
			{Name: "worker-2", Service: "worker", SHA256: digest(worker2Tok)},
			{Name: "worker-beta", Service: "worker", Projects: []string{"beta"}, SHA256: digest(betaWorker)},
		},
		Authorization: access.Authorization{Rules: []string{`!(resource.runs_code && resource.agent.network == "allow")`}},
		Credentials:   access.Credentials{Grants: map[string][]string{"alpha": {"ALPHA_KEY", "OPENAI_API_KEY"}, "beta": {"BETA_KEY"}}},
		Agents:        access.Agents{TrustedCommands: [][]string{{"trusted-mcp-server", "--stdio"}}},
	}
}

// fixture is a server over a fresh store and datasets_dir.
type fixture struct {
	t       *testing.T
	st      *store.Store
	srv     *server.Server
	url     string
	dir     string // datasets_dir
	outside string // a directory beside it holding a secret
	skew    *atomic.Int64
}

// expireLeases moves the server's clock past every lease and sweeps, as
// the sweeper does when a worker stops heartbeating.
func (f *fixture) expireLeases() {
	f.skew.Add(int64(time.Hour))
	f.srv.SweepOnce(context.Background())
}

func newFixture(t *testing.T, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	ctx := context.Background()
	base := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(base, "evalsi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir, outside := filepath.Join(base, "datasets"), filepath.Join(base, "outside")
	files := map[string]string{
		"shared.jsonl":                           `{"id":"s1","input":"shared question","expected":"a"}` + "\n",
		"promoted/alpha/mine.jsonl":              `{"id":"m1","input":"alpha question"}` + "\n",
		"promoted/beta/" + betaSecret + ".jsonl": `{"id":"` + betaSecret + `-rec","input":"` + betaSecret + ` content"}` + "\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.jsonl"), []byte(`{"id":"x","input":"OUTSIDESECRET"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"escape.jsonl": filepath.Join(outside, "secret.jsonl"), "escape-dir": outside, "rel-escape.jsonl": "../outside/secret.jsonl"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}

	acc, err := access.New(accessConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	datasets := planner.Datasets()
	datasets.ServeRuns(regress.NewRunSource(st, logger))
	skew := new(atomic.Int64)
	srv, err := server.New(server.Options{
		Store: st, Access: acc, Records: &planner.Host{Datasets: datasets, Logger: logger},
		DatasetsDir: dir, Viewer: true, Promote: promoter(dir), Logger: logger,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &fixture{t: t, st: st, srv: srv, url: hs.URL, dir: dir, outside: outside, skew: skew}
}

// promoter is evalsid serve's: promote into <dir>/promoted/<project>/.
func promoter(dir string) server.PromoteFunc {
	return func(ctx context.Context, st server.Store, project, runID string, req api.PromoteRequest) (api.PromoteResult, error) {
		added, skipped, err := regress.Promote(ctx, st, runID, regress.Options{Dataset: req.Dataset, When: req.When, IncludeOutputs: req.IncludeOutputs, Project: project, Dir: dir})
		if err != nil {
			return api.PromoteResult{}, err
		}
		path, err := regress.DatasetPath(dir, project, req.Dataset)
		if err != nil {
			return api.PromoteResult{}, err
		}
		rel, _ := filepath.Rel(dir, path)
		return api.PromoteResult{Added: added, Skipped: skipped, Path: rel}, nil
	}
}

// response is a response read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request; body is sent as is when it is a string or []byte,
// else as JSON.
func (f *fixture) do(method, path, token string, body any, header ...string) response {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// decodeAs decodes a response body that must have the status want.
func decodeAs[T any](t *testing.T, r response, want int) T {
	t.Helper()
	var v T
	if r.status != want {
		t.Fatalf("got %s, want status %d", r, want)
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
	return v
}

// apiError checks r is a JSON api.Error with the status and code, whose
// message (with the field) contains each of mentions.
func apiError(t *testing.T, r response, status int, code string, mentions ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("got %s, want status %d", r, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q, want application/json", ct)
	}
	var e api.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("error body %s is not an api.Error with a message (%v)", r.body, err)
	}
	if e.Error.Code != code {
		t.Errorf("error code %q, want %q (%s)", e.Error.Code, code, r.body)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Error.Message+" "+e.Error.Field, m) {
			t.Errorf("error %s does not mention %q", r.body, m)
		}
	}
}

// modelSpec is a plain model run (no code runs) of project records.
func modelSpec(name, keyEnv string, records ...string) map[string]any {
	var recs []map[string]any
	for _, r := range records {
		recs = append(recs, map[string]any{"id": r, "input": r + " input", "expected": "yes"})
	}
	target := map[string]any{"connector": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
	if keyEnv != "" {
		target["api_key_env"] = keyEnv
	}
	return map[string]any{"name": name, "target": target, "evaluators": []string{"exact-match"}, "dataset": map[string]any{"records": recs}}
}

// agentSpec is an agent run on the built-in harness with the sandbox's
// network set; extra is merged into harness.builtin.
func agentSpec(network string, builtin map[string]any) map[string]any {
	s := modelSpec("agent", "ALPHA_KEY", "a1")
	if builtin == nil {
		builtin = map[string]any{}
	}
	s["harness"] = map[string]any{"builtin": builtin}
	s["environment"] = map[string]any{"sandbox": map[string]any{"network": network}}
	return s
}

func (f *fixture) submit(token string, sp map[string]any) api.Run {
	f.t.Helper()
	return decodeAs[api.Run](f.t, f.do("POST", "/v1/runs", token, map[string]any{"spec": sp}), http.StatusCreated)
}

// runCount is how many runs the store holds (every project).
func (f *fixture) runCount() int {
	f.t.Helper()
	runs, err := f.st.ListRuns(context.Background(), store.ListRunsOptions{Limit: 1 << 20})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(runs)
}

// snapshot is everything a request could write, as text (see state).
func (f *fixture) snapshot() string {
	f.t.Helper()
	st := f.state()
	keys := slices.Sorted(maps.Keys(st))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, st[k])
	}
	return b.String()
}

// state is everything a request could write, keyed "run <id>", "attempt
// <id>" and "file <path under datasets_dir>": the runs, their attempts
// with their leases, events and scores, and the files of datasets_dir.
func (f *fixture) state() map[string]string {
	f.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	runs, err := f.st.ListRuns(ctx, store.ListRunsOptions{Limit: 1 << 20})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range runs {
		// A run's status and summary change when its last trial
		// finishes: that is the finish's write, not a run's.
		out["run "+r.ID] = fmt.Sprintf("project=%s name=%s", r.Project, r.Name)
		ts, err := f.st.ListAttempts(ctx, r.ID)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, t := range ts {
			n, err := f.st.CountEvents(ctx, t.ID)
			if err != nil {
				f.t.Fatal(err)
			}
			sc, err := f.st.TrialScores(ctx, t.ID)
			if err != nil {
				f.t.Fatal(err)
			}
			out["attempt "+t.ID] = fmt.Sprintf("run=%s %s owner=%q epoch=%d until=%v events=%d scores=%v output=%q", r.ID, t.Status, t.LeaseOwner, t.LeaseEpoch, t.LeaseUntil, n, sc, t.Output)
		}
	}
	err = filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		c, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(f.dir, p)
		out["file "+rel] = fmt.Sprintf("%x", sha256.Sum256(c))
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// lease leases one attempt as a worker.
func (f *fixture) lease(token, worker string, runs ...string) api.Lease {
	f.t.Helper()
	return decodeAs[api.Lease](f.t, f.do("POST", "/v1/worker/lease", token, api.LeaseRequest{Worker: worker, Runs: runs}), http.StatusOK)
}

func recordID(l api.Lease) string {
	var rec struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(l.Record, &rec)
	return rec.ID
}

func finishBody(l api.Lease, output string) api.FinishRequest {
	rec := struct{ ID string }{recordID(l)}
	return api.FinishRequest{Fence: api.Fence{Epoch: l.Epoch}, Outcome: api.Outcome{
		RecordID: rec.ID, Trial: l.Trial, Attempt: l.Attempt, Status: "completed", Output: output,
		Evaluations: []evaluate.EvaluatorResult{{Evaluator: "exact-match", Scores: []evaluate.Score{{Name: "exact-match", Value: 1}}}},
	}}
}

func eventsBody(epoch int64, text string) string {
	return fmt.Sprintf(`{"epoch":%d,"events":[{"seq":1,"time":"2026-01-01T00:00:00Z","kind":"log","log":{"text":%q}}]}`, epoch, text)
}

// seedBeta makes a finished run of project beta whose every name and
// content carries betaSecret, and returns it with its attempts' ids.
func (f *fixture) seedBeta() (api.Run, []string) {
	f.t.Helper()
	run := f.submit(betaEditor, modelSpec(betaSecret+"-run", "BETA_KEY", betaSecret+"-r1"))
	l := f.lease(workerTok, "w1", run.ID)
	if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/events", workerTok, eventsBody(l.Epoch, betaSecret+" event")); r.status != http.StatusNoContent {
		f.t.Fatalf("events: %s", r)
	}
	if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", workerTok, finishBody(l, betaSecret+" output")); r.status != http.StatusNoContent {
		f.t.Fatalf("finish: %s", r)
	}
	return run, []string{l.TrialID}
}

// TestCrossProjectReadsReturnNothing proves that a token of project alpha
// reads nothing of project beta through any route — API or viewer, by id,
// by prefix, by list, by cursor — and that what it gets for beta's real
// ids is byte for byte what it gets for ids that do not exist, so not even
// existence leaks.
func TestCrossProjectReadsReturnNothing(t *testing.T) {
	f := newFixture(t, nil)
	beta, trials := f.seedBeta()
	alphaRun := f.submit(alphaEditor, modelSpec("alpha-run", "ALPHA_KEY", "a1"))
	const ghostRun, ghostTrial = "0000000000000000000000000000ghost", "000000000000000000000000ghosttrial"
	secrets := []string{betaSecret, beta.ID, trials[0]}

	type probe struct {
		name, path, ghost string // ghost: the same request for an id that does not exist
		status            int
		cookie            bool
	}
	probes := []probe{
		{"get run", "/v1/runs/" + beta.ID, "/v1/runs/" + ghostRun, http.StatusNotFound, false},
		{"get run by prefix", "/v1/runs/" + beta.ID[:6], "/v1/runs/zzzzzz", http.StatusNotFound, false},
		{"trials", "/v1/runs/" + beta.ID + "/trials", "/v1/runs/" + ghostRun + "/trials", http.StatusNotFound, false},
		{"export", "/v1/runs/" + beta.ID + "/export", "/v1/runs/" + ghostRun + "/export", http.StatusNotFound, false},
		{"events", "/v1/trials/" + trials[0] + "/events", "/v1/trials/" + ghostTrial + "/events", http.StatusNotFound, false},
		{"list runs", "/v1/runs", "", http.StatusOK, false},
		{"list another project's runs", "/v1/runs?project=beta", "", http.StatusForbidden, false},
		{"page from another project's run", "/v1/runs?before=" + beta.ID, "/v1/runs?before=" + ghostRun, http.StatusBadRequest, false},
		{"list datasets", "/v1/datasets", "", http.StatusOK, false},
		{"another project's promoted dataset", "/v1/datasets/promoted/beta/" + betaSecret + ".jsonl", "/v1/datasets/promoted/beta/nothing" + ".jsonl", http.StatusNotFound, false},
		{"viewer runs", "/api/runs", "", http.StatusOK, true},
		{"viewer run", "/api/runs/" + beta.ID, "/api/runs/" + ghostRun, http.StatusNotFound, true},
		{"viewer trial", "/api/trials/" + trials[0], "/api/trials/" + ghostTrial, http.StatusNotFound, true},
		{"viewer events", "/api/trials/" + trials[0] + "/events", "/api/trials/" + ghostTrial + "/events", http.StatusNotFound, true},
		{"viewer compare", "/api/compare?base=" + alphaRun.ID + "&head=" + beta.ID, "/api/compare?base=" + alphaRun.ID + "&head=" + ghostRun, http.StatusNotFound, true},
		{"viewer run page", "/runs/" + beta.ID, "/runs/" + ghostRun, 0, true},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			get := func(path string) response {
				if p.cookie {
					return f.do("GET", path, "", nil, "Cookie", "evalsi_token="+alphaEditor)
				}
				return f.do("GET", path, alphaEditor, nil)
			}
			r := get(p.path)
			if p.status != 0 && r.status != p.status {
				t.Fatalf("got %s, want status %d", r, p.status)
			}
			if r.status >= 500 {
				t.Fatalf("got %s", r)
			}
			// An id the request names, echoed back, is no leak; anything
			// else of beta's is.
			body := string(r.body)
			for _, s := range secrets {
				if strings.Contains(p.path, s) {
					body = strings.ReplaceAll(body, s, "ID")
				}
			}
			for _, s := range secrets {
				if strings.Contains(body, s) {
					t.Errorf("the response to alpha carries %q of project beta: %s", s, r.body)
				}
			}
			if p.ghost != "" {
				g := get(p.ghost)
				norm := func(b []byte, path string) string {
					s := string(b)
					for _, id := range []string{beta.ID, trials[0], beta.ID[:6], ghostRun, ghostTrial, "zzzzzz", betaSecret, "nothing"} {
						s = strings.ReplaceAll(s, id, "ID")
					}
					return s
				}
				if g.status != r.status || norm(g.body, p.ghost) != norm(r.body, p.path) {
					t.Errorf("beta's resource answers differently from a missing one:\n beta:    %s\n missing: %s", r, g)
				}
			}
		})
	}
	// Alpha still reads its own run, so the denials above are not a
	// broken server.
	got := decodeAs[api.RunList](t, f.do("GET", "/v1/runs", alphaEditor, nil), http.StatusOK)
	if len(got.Runs) != 1 || got.Runs[0].ID != alphaRun.ID {
		t.Errorf("alpha lists %+v, want its one run %s", got.Runs, alphaRun.ID)
	}
	ds := decodeAs[api.DatasetList](t, f.do("GET", "/v1/datasets", alphaEditor, nil), http.StatusOK)
	var paths []string
	for _, d := range ds.Datasets {
		paths = append(paths, d.Path)
	}
	if !strings.Contains(strings.Join(paths, " "), "promoted/alpha/mine.jsonl") {
		t.Errorf("alpha's datasets %v lack its own promoted dataset", paths)
	}
	// A run may not read another project's run as its dataset either.
	before := f.snapshot()
	sp := modelSpec("reads-beta", "ALPHA_KEY")
	sp["dataset"] = map[string]any{"run": map[string]any{"run_id": beta.ID}}
	r := f.do("POST", "/v1/runs", alphaEditor, map[string]any{"spec": sp})
	apiError(t, r, http.StatusUnprocessableEntity, "refused", "dataset.run")
	if strings.Contains(string(r.body), betaSecret) {
		t.Errorf("the refusal carries beta's content: %s", r)
	}
	if after := f.snapshot(); after != before {
		t.Errorf("a refused submission wrote:\nbefore %s\nafter %s", before, after)
	}
}

// TestSubmitRefusals proves each refusal at submit answers with the right
// status and names what was wrong, and writes nothing; and that what the
// rules allow is admitted.
func TestSubmitRefusals(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name    string
		token   string
		body    any
		header  []string
		status  int
		code    string
		mention []string
	}{
		{"ungranted api_key_env", alphaEditor, map[string]any{"spec": modelSpec("x", "NOT_GRANTED_KEY", "r1")}, nil, 422, "refused", []string{"NOT_GRANTED_KEY"}},
		{"another project's grant", alphaEditor, map[string]any{"spec": modelSpec("x", "BETA_KEY", "r1")}, nil, 422, "refused", []string{"BETA_KEY"}},
		{"ungranted headers_env", alphaEditor, map[string]any{"spec": func() map[string]any {
			s := modelSpec("x", "", "r1")
			s["target"] = map[string]any{"agent": map[string]any{"http": map[string]any{"url": "http://127.0.0.1:9/", "headers_env": map[string]string{"X-Auth": "SECRET_HEADER_VAR"}}}}
			return s
		}()}, nil, 422, "refused", []string{"SECRET_HEADER_VAR"}},
		{"untrusted stdio MCP command", alphaEditor, map[string]any{"spec": agentSpec("deny", map[string]any{"tools": map[string]any{"mcp": []any{map[string]any{"name": "fs", "command": []string{"sh", "-c", "id"}}}}})}, nil, 422, "refused", []string{"sh"}},
		{"trusted command with extra args", alphaEditor, map[string]any{"spec": agentSpec("deny", map[string]any{"tools": map[string]any{"mcp": []any{map[string]any{"name": "fs", "command": []string{"trusted-mcp-server", "--stdio", "--exec=sh"}}}}})}, nil, 422, "refused", []string{"trusted-mcp-server"}},
		{"CEL rule denies network allow", alphaEditor, map[string]any{"spec": agentSpec("allow", nil)}, nil, 403, "forbidden", []string{"authorization.rules[0]"}},
		{"viewer cannot submit", alphaViewer, map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, nil, 403, "forbidden", []string{"runs.create"}},
		{"worker cannot submit", workerTok, map[string]any{"project": "alpha", "spec": modelSpec("x", "ALPHA_KEY", "r1")}, nil, 403, "forbidden", []string{"runs.create"}},
		{"into another project", alphaEditor, map[string]any{"project": "beta", "spec": modelSpec("x", "", "r1")}, nil, 403, "forbidden", []string{"another project"}},
		{"no token", "", map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, nil, 401, "unauthenticated", []string{"bearer token"}},
		{"unknown token", "not-a-token-of-this-server-000", map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, nil, 401, "unauthenticated", []string{"not valid"}},
		{"basic auth", "", map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, []string{"Authorization", "Basic YTpi"}, 401, "unauthenticated", []string{"bearer token"}},
		{"cookie on a POST", "", map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, []string{"Cookie", "evalsi_token=" + alphaEditor}, 401, "unauthenticated", []string{"bearer token"}},
		{"malformed JSON", alphaEditor, `{"spec": {`, nil, 400, "bad_request", []string{"JSON"}},
		{"not an object", alphaEditor, `[1,2]`, nil, 400, "bad_request", []string{"JSON"}},
		{"empty body", alphaEditor, ``, nil, 400, "bad_request", []string{"JSON body"}},
		{"trailing data", alphaEditor, `{"spec": {"name": "x"}} {"spec": {}}`, nil, 400, "bad_request", []string{"after its object"}},
		{"unknown field", alphaEditor, map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1"), "priority": 9}, nil, 400, "bad_request", []string{"priority"}},
		{"unknown spec field", alphaEditor, map[string]any{"spec": func() map[string]any { s := modelSpec("x", "ALPHA_KEY", "r1"); s["trails"] = 3; return s }()}, nil, 400, "bad_request", []string{"trails"}},
		{"no spec", alphaEditor, map[string]any{"name": "x.yaml"}, nil, 400, "bad_request", []string{"spec"}},
		{"null spec", alphaEditor, `{"spec": null}`, nil, 400, "bad_request", []string{"spec"}},
		{"a budget the workers would not enforce", alphaEditor, map[string]any{"spec": func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY", "r1")
			s["budget"] = map[string]any{"usd": 5}
			return s
		}()}, nil, 400, "bad_request", []string{"budget", "embedded runs only"}},
		{"wrong content type", alphaEditor, map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, []string{"Content-Type", "text/plain"}, 415, "bad_request", []string{"application/json"}},
		{"json-lookalike content type", alphaEditor, map[string]any{"spec": modelSpec("x", "ALPHA_KEY", "r1")}, []string{"Content-Type", "application/jsonp"}, 415, "bad_request", []string{"application/json"}},
		{"oversized body", alphaEditor, `{"spec": {"name": "` + strings.Repeat("x", 33<<20) + `"}}`, nil, 413, "too_large", []string{"limit"}},
		{"dataset path outside", alphaEditor, map[string]any{"spec": func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY")
			s["dataset"] = map[string]any{"path": "../outside/secret.jsonl"}
			return s
		}()}, nil, 400, "bad_request", []string{"dataset.path"}},
		{"dataset path absolute", alphaEditor, map[string]any{"spec": func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY")
			s["dataset"] = map[string]any{"path": "/etc/passwd"}
			return s
		}()}, nil, 400, "bad_request", []string{"dataset.path"}},
		{"dataset path through a symlink", alphaEditor, map[string]any{"spec": func() map[string]any {
			s := modelSpec("x", "ALPHA_KEY")
			s["dataset"] = map[string]any{"path": "escape.jsonl"}
			return s
		}()}, nil, 400, "bad_request", []string{"dataset.path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do("POST", "/v1/runs", tt.token, tt.body, tt.header...)
			apiError(t, r, tt.status, tt.code, tt.mention...)
			if strings.Contains(string(r.body), "OUTSIDESECRET") {
				t.Errorf("the error carries a file from outside datasets_dir: %s", r)
			}
			if after := f.snapshot(); after != before {
				t.Errorf("a refused submission wrote:\nbefore %s\nafter %s", before, after)
			}
		})
	}
	if n := f.runCount(); n != 0 {
		t.Fatalf("%d runs in the store after refused submissions", n)
	}

	// What the refusals refused, corrected, is admitted: the same agent
	// run with network: deny (submit plans nothing, so no sandbox rung is
	// needed here), a trusted MCP command, a granted key, a dataset file.
	admitted := []map[string]any{
		agentSpec("deny", nil),
		agentSpec("deny", map[string]any{"tools": map[string]any{"mcp": []any{map[string]any{"name": "fs", "command": []string{"trusted-mcp-server", "--stdio"}}}}}),
		modelSpec("granted", "ALPHA_KEY", "r1"),
		func() map[string]any {
			s := modelSpec("file", "ALPHA_KEY")
			s["dataset"] = map[string]any{"path": "shared.jsonl"}
			return s
		}(),
	}
	for i, sp := range admitted {
		run := f.submit(alphaEditor, sp)
		if run.Project != "alpha" || run.Status == "" || run.Counts["pending"] == 0 {
			t.Errorf("admitted spec %d: run %+v, want alpha's with pending trials", i, run)
		}
	}
	if n := f.runCount(); n != len(admitted) {
		t.Errorf("%d runs in the store, want %d", n, len(admitted))
	}
}

// TestRolesAndQueryBounds proves the role boundaries between viewers,
// editors and workers, and the documented bounds of query parameters.
func TestRolesAndQueryBounds(t *testing.T) {
	f := newFixture(t, nil)
	run := f.submit(alphaEditor, modelSpec("alpha-run", "ALPHA_KEY", "a1"))
	tests := []struct {
		name, method, path, token string
		body                      any
		status                    int
		code                      string
	}{
		{"viewer reads runs", "GET", "/v1/runs", alphaViewer, nil, 200, ""},
		{"viewer reads a run", "GET", "/v1/runs/" + run.ID, alphaViewer, nil, 200, ""},
		{"viewer cannot promote", "POST", "/v1/runs/" + run.ID + "/promote", alphaViewer, api.PromoteRequest{Dataset: "d", When: "true"}, 403, "forbidden"},
		{"worker cannot read runs", "GET", "/v1/runs", workerTok, nil, 403, "forbidden"},
		{"worker cannot read a run", "GET", "/v1/runs/" + run.ID, workerTok, nil, 403, "forbidden"},
		{"worker cannot read trials", "GET", "/v1/runs/" + run.ID + "/trials", workerTok, nil, 403, "forbidden"},
		{"worker cannot export", "GET", "/v1/runs/" + run.ID + "/export", workerTok, nil, 403, "forbidden"},
		{"worker cannot list datasets", "GET", "/v1/datasets", workerTok, nil, 403, "forbidden"},
		{"worker cannot read a dataset", "GET", "/v1/datasets/shared.jsonl", workerTok, nil, 403, "forbidden"},
		{"project token cannot lease", "POST", "/v1/worker/lease", alphaEditor, api.LeaseRequest{Worker: "w"}, 403, "forbidden"},
		{"viewer cannot lease", "POST", "/v1/worker/lease", alphaViewer, api.LeaseRequest{Worker: "w"}, 403, "forbidden"},
		{"project token cannot read a worker's spec", "GET", "/v1/worker/runs/" + run.ID, alphaEditor, nil, 403, "forbidden"},
		{"worker reads only specs of runs it leased", "GET", "/v1/worker/runs/" + run.ID, workerTok, nil, 404, "not_found"},
		{"project token cannot heartbeat", "POST", "/v1/worker/trials/x/heartbeat", alphaEditor, api.HeartbeatRequest{Fence: api.Fence{Epoch: 1}}, 403, "forbidden"},
		{"limit 0", "GET", "/v1/runs?limit=0", alphaEditor, nil, 400, "bad_request"},
		{"limit over 1000", "GET", "/v1/runs?limit=1001", alphaEditor, nil, 400, "bad_request"},
		{"limit not a number", "GET", "/v1/runs?limit=ten", alphaEditor, nil, 400, "bad_request"},
		{"limit 1000", "GET", "/v1/runs?limit=1000", alphaEditor, nil, 200, ""},
		{"unknown cursor", "GET", "/v1/runs?before=nope", alphaEditor, nil, 400, "bad_request"},
		{"export format", "GET", "/v1/runs/" + run.ID + "/export?format=csv", alphaEditor, nil, 400, "bad_request"},
		{"wrong method", "DELETE", "/v1/runs/" + run.ID, alphaEditor, nil, 405, "method_not_allowed"},
		{"wrong method on an open route", "POST", "/healthz", "", nil, 405, "method_not_allowed"},
		{"unknown API route", "GET", "/v1/nothing", alphaEditor, nil, 404, "not_found"},
		{"missing token on a read", "GET", "/v1/runs", "", nil, 401, "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			r := f.do(tt.method, tt.path, tt.token, tt.body)
			if tt.code == "" {
				if r.status != tt.status {
					t.Fatalf("got %s, want %d", r, tt.status)
				}
			} else {
				apiError(t, r, tt.status, tt.code)
			}
			if after := f.snapshot(); after != before {
				t.Errorf("the request wrote:\nbefore %s\nafter %s", before, after)
			}
		})
	}
	// A trial's events with bad bounds.
	l := f.lease(workerTok, "w1", run.ID)
	for _, q := range []string{"after=-1", "after=x", "limit=0", "limit=10001"} {
		apiError(t, f.do("GET", "/v1/trials/"+l.TrialID+"/events?"+q, alphaEditor, nil), 400, "bad_request")
	}
}

// TestWorkerProtocol proves lease → heartbeat → events → finish over HTTP,
// that a stale epoch or another worker's token gets 409 lease_lost and
// writes nothing, that malformed worker writes are 4xx and write nothing,
// and that finishing the last trial finalizes the run.
func TestWorkerProtocol(t *testing.T) {
	f := newFixture(t, nil)
	run := f.submit(alphaEditor, modelSpec("proto", "ALPHA_KEY", "r1", "r2"))

	// A lease that expired and was leased again: its first epoch is stale.
	stale := f.lease(workerTok, "w1", run.ID)
	f.expireLeases()
	l1 := f.lease(workerTok, "w1", run.ID)
	if recordID(l1) != recordID(stale) || l1.Attempt <= stale.Attempt {
		t.Fatalf("after the sweep, leased %+v, want a new attempt of %+v", l1, stale)
	}
	spec := decodeAs[api.RunSpec](t, f.do("GET", "/v1/worker/runs/"+run.ID, workerTok, nil), http.StatusOK)
	if spec.ID != run.ID || len(spec.Spec) == 0 {
		t.Fatalf("worker run spec %+v", spec)
	}
	apiError(t, f.do("GET", "/v1/worker/runs/"+run.ID, worker2Tok, nil), 404, "not_found")

	hb := decodeAs[map[string]any](t, f.do("POST", "/v1/worker/trials/"+l1.TrialID+"/heartbeat", workerTok, api.HeartbeatRequest{Fence: api.Fence{Epoch: l1.Epoch}}), http.StatusOK)
	if hb["lease_until"] == nil {
		t.Errorf("heartbeat answered %v", hb)
	}
	if r := f.do("POST", "/v1/worker/trials/"+l1.TrialID+"/events", workerTok, eventsBody(l1.Epoch, "hello")); r.status != http.StatusNoContent {
		t.Fatalf("events: %s", r)
	}

	path := func(op string) string { return "/v1/worker/trials/" + l1.TrialID + "/" + op }
	stalePath := func(op string) string { return "/v1/worker/trials/" + stale.TrialID + "/" + op }
	hbBody := func(e int64) any { return api.HeartbeatRequest{Fence: api.Fence{Epoch: e}} }
	fenced := []struct {
		name, path, token string
		body              any
		status            int
		code              string
	}{
		{"expired lease heartbeat", stalePath("heartbeat"), workerTok, hbBody(stale.Epoch), 409, "lease_lost"},
		{"expired lease events", stalePath("events"), workerTok, eventsBody(stale.Epoch, "late"), 409, "lease_lost"},
		{"expired lease finish", stalePath("finish"), workerTok, finishBody(stale, "late"), 409, "lease_lost"},
		{"old epoch on the new attempt", path("events"), workerTok, eventsBody(stale.Epoch, "late"), 409, "lease_lost"},
		{"future epoch heartbeat", path("heartbeat"), workerTok, hbBody(l1.Epoch + 1), 409, "lease_lost"},
		{"future epoch events", path("events"), workerTok, eventsBody(l1.Epoch+1, "late"), 409, "lease_lost"},
		{"future epoch finish", path("finish"), workerTok, func() any { b := finishBody(l1, "late"); b.Epoch++; return b }(), 409, "lease_lost"},
		{"finish without evaluator results", path("finish"), workerTok, func() any { b := finishBody(l1, "x"); b.Outcome.Evaluations = nil; return b }(), 400, "bad_request"},
		{"finish with an evaluator result too many", path("finish"), workerTok, func() any {
			b := finishBody(l1, "x")
			b.Outcome.Evaluations = append(b.Outcome.Evaluations, b.Outcome.Evaluations[0])
			return b
		}(), 400, "bad_request"},
		{"another worker's heartbeat", path("heartbeat"), worker2Tok, hbBody(l1.Epoch), 409, "lease_lost"},
		{"another worker's events", path("events"), worker2Tok, eventsBody(l1.Epoch, "theirs"), 409, "lease_lost"},
		{"another worker's finish", path("finish"), worker2Tok, finishBody(l1, "theirs"), 409, "lease_lost"},
		{"no epoch", path("events"), workerTok, `{"events":[]}`, 400, "bad_request"},
		{"event without kind", path("events"), workerTok, fmt.Sprintf(`{"epoch":%d,"events":[{"seq":2}]}`, l1.Epoch), 400, "bad_request"},
		{"negative seq", path("events"), workerTok, fmt.Sprintf(`{"epoch":%d,"events":[{"seq":-1,"kind":"log"}]}`, l1.Epoch), 400, "bad_request"},
		{"unknown event field", path("events"), workerTok, fmt.Sprintf(`{"epoch":%d,"events":[{"seq":2,"kind":"log","x":1}]}`, l1.Epoch), 400, "bad_request"},
		{"bad outcome status", path("finish"), workerTok, func() any { b := finishBody(l1, "x"); b.Outcome.Status = "pending"; return b }(), 400, "bad_request"},
		{"unknown trial", "/v1/worker/trials/nope/finish", workerTok, finishBody(l1, "x"), 404, "not_found"},
		{"oversized events", path("events"), workerTok, `{"epoch":1,"events":[{"kind":"log","log":{"text":"` + strings.Repeat("x", 65<<20) + `"}}]}`, 413, "too_large"},
		{"bad worker name", "/v1/worker/lease", workerTok, api.LeaseRequest{Worker: "w/../x"}, 400, "bad_request"},
	}
	for _, tt := range fenced {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot()
			apiError(t, f.do("POST", tt.path, tt.token, tt.body), tt.status, tt.code)
			if after := f.snapshot(); after != before {
				t.Errorf("a refused worker write wrote:\nbefore %s\nafter %s", before, after)
			}
		})
	}

	if r := f.do("POST", path("finish"), workerTok, finishBody(l1, "yes")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	// A finished attempt's lease is gone: a second finish is lost.
	apiError(t, f.do("POST", path("finish"), workerTok, finishBody(l1, "again")), 409, "lease_lost")
	if got := decodeAs[api.Run](t, f.do("GET", "/v1/runs/"+run.ID, alphaEditor, nil), 200); got.Summary != nil {
		t.Fatalf("the run has a summary with a trial left: %+v", got)
	}

	l2 := f.lease(worker2Tok, "w2", run.ID)
	if r := f.do("POST", "/v1/worker/lease", workerTok, api.LeaseRequest{Worker: "w1", Runs: []string{run.ID}}); r.status != http.StatusNoContent {
		t.Fatalf("lease with nothing left: %s, want 204", r)
	}
	if r := f.do("POST", "/v1/worker/trials/"+l2.TrialID+"/finish", worker2Tok, finishBody(l2, "no")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	got := decodeAs[api.Run](t, f.do("GET", "/v1/runs/"+run.ID, alphaEditor, nil), 200)
	if got.Summary == nil || got.Status == store.RunRunning {
		t.Fatalf("the run is not finalized after its last trial: %+v", got)
	}
	trials := decodeAs[api.TrialList](t, f.do("GET", "/v1/runs/"+run.ID+"/trials", alphaEditor, nil), 200)
	outputs := map[string]string{}
	for _, tr := range trials.Trials {
		outputs[tr.RecordID] = tr.Output
	}
	if len(outputs) != 2 || outputs["r1"]+outputs["r2"] != "yesno" && outputs["r1"]+outputs["r2"] != "noyes" {
		t.Errorf("trial outputs %v: the refused writes changed them", outputs)
	}
	evs := decodeAs[api.EventList](t, f.do("GET", "/v1/trials/"+l1.TrialID+"/events", alphaEditor, nil), 200)
	if len(evs.Events) != 1 {
		t.Errorf("events %+v, want the one written under the lease", evs.Events)
	}
}

// TestConfinedWorker proves a worker confined to a project leases only
// that project's trials, and reads and writes nothing of another's.
func TestConfinedWorker(t *testing.T) {
	f := newFixture(t, nil)
	alpha := f.submit(alphaEditor, modelSpec("alpha-run", "ALPHA_KEY", "a1"))
	if r := f.do("POST", "/v1/worker/lease", betaWorker, api.LeaseRequest{Worker: "b1"}); r.status != http.StatusNoContent {
		t.Fatalf("a beta worker with only alpha's trials queued: %s, want 204", r)
	}
	beta := f.submit(betaEditor, modelSpec("beta-run", "BETA_KEY", "b1"))
	l := f.lease(betaWorker, "b1")
	if l.RunID != beta.ID {
		t.Fatalf("the beta worker leased %+v, want a trial of %s", l, beta.ID)
	}
	if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", betaWorker, finishBody(l, "yes")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	if r := f.do("POST", "/v1/worker/lease", betaWorker, api.LeaseRequest{Worker: "b1", Runs: []string{alpha.ID}}); r.status != http.StatusNoContent {
		t.Fatalf("a beta worker naming alpha's run: %s, want 204", r)
	}
	apiError(t, f.do("GET", "/v1/worker/runs/"+alpha.ID, betaWorker, nil), 404, "not_found")
	// Alpha's trial is still there for an unconfined worker.
	if l := f.lease(workerTok, "w1"); l.RunID != alpha.ID {
		t.Fatalf("leased %+v, want alpha's trial", l)
	}
}

// TestDatasetPaths proves a dataset path never reaches outside
// datasets_dir: dot segments, absolute paths, escaped slashes and symlinks
// out all get a 4xx and no byte of the outside file.
func TestDatasetPaths(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		path   string
		status int
	}{
		{"shared.jsonl", 200},
		{"promoted/alpha/mine.jsonl", 200},
		{"../outside/secret.jsonl", 0},
		{"..%2Foutside%2Fsecret.jsonl", 0},
		{"promoted/..%2F..%2F..%2Foutside/secret.jsonl", 0},
		{"%2Fetc%2Fpasswd", 0},
		{"%2E%2E/outside/secret.jsonl", 0},
		{"escape.jsonl", 0},
		{"rel-escape.jsonl", 0},
		{"escape-dir/secret.jsonl", 0},
		{"promoted", 0},
		{"./shared.jsonl", 0},
		{"shared.jsonl/", 0},
		{"nothing.jsonl", 404},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := f.do("GET", "/v1/datasets/"+tt.path, alphaEditor, nil)
			switch {
			case tt.status != 0 && r.status != tt.status:
				t.Fatalf("got %s, want %d", r, tt.status)
			case tt.status == 0 && (r.status < 400 || r.status >= 500):
				t.Fatalf("got %s, want a 4xx", r)
			}
			if strings.Contains(string(r.body), "OUTSIDESECRET") || strings.Contains(string(r.body), "root:") {
				t.Fatalf("a file outside datasets_dir was served: %s", r)
			}
			if r.status >= 400 {
				apiError(t, r, r.status, map[int]string{400: "bad_request", 404: "not_found"}[r.status])
			}
		})
	}
	ds := decodeAs[api.DatasetList](t, f.do("GET", "/v1/datasets", alphaEditor, nil), http.StatusOK)
	for _, d := range ds.Datasets {
		if strings.Contains(d.Path, "escape") {
			t.Errorf("the listing shows a symlink out of datasets_dir: %+v", d)
		}
	}
}

// TestPromote proves promote needs datasets.write, writes into the
// caller's own project, and adds nothing the second time.
func TestPromote(t *testing.T) {
	f := newFixture(t, nil)
	run := f.submit(alphaEditor, modelSpec("p", "ALPHA_KEY", "r1"))
	l := f.lease(workerTok, "w1", run.ID)
	if r := f.do("POST", "/v1/worker/trials/"+l.TrialID+"/finish", workerTok, finishBody(l, "yes")); r.status != http.StatusNoContent {
		t.Fatalf("finish: %s", r)
	}
	first := decodeAs[api.PromoteResult](t, f.do("POST", "/v1/runs/"+run.ID+"/promote", alphaEditor, api.PromoteRequest{Dataset: "reg", When: "true"}), 200)
	if first.Added != 1 || first.Path != filepath.Join("promoted", "alpha", "reg.jsonl") {
		t.Fatalf("first promote %+v", first)
	}
	before := f.snapshot()
	second := decodeAs[api.PromoteResult](t, f.do("POST", "/v1/runs/"+run.ID+"/promote", alphaEditor, api.PromoteRequest{Dataset: "reg", When: "true"}), 200)
	if second.Added != 0 {
		t.Errorf("second promote %+v added records", second)
	}
	for _, bad := range []api.PromoteRequest{{Dataset: "../beta/x", When: "true"}, {Dataset: "", When: "true"}, {Dataset: "d", When: "((("}} {
		r := f.do("POST", "/v1/runs/"+run.ID+"/promote", alphaEditor, bad)
		if r.status < 400 || r.status >= 500 {
			t.Errorf("promote %+v: %s, want a 4xx", bad, r)
		}
	}
	if after := f.snapshot(); after != before {
		t.Errorf("a promote that added nothing or was refused wrote:\nbefore %s\nafter %s", before, after)
	}
}

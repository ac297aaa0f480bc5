package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"evals.si/api"
	"evals.si/internal/testenv"
)

// TestSchemathesis runs schemathesis (scripts/schemathesis.sh installs it)
// against the served OpenAPI description, once with an editor's token over
// every operation and once with a worker's over the worker protocol, and
// checks its three properties: no 5xx and every response as documented
// (schemathesis's checks), and no refused request writes anything (this
// test's: the store and datasets_dir after the run differ from before
// only by what the 2xx responses it logged account for).
func TestSchemathesis(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "python", "tools", "schemathesis"))
	if err != nil {
		t.Fatal(err)
	}
	python := filepath.Join(dir, ".venv", "bin", "python")
	if _, err := os.Stat(filepath.Join(dir, ".venv", "bin", "schemathesis")); err != nil {
		testenv.Missing(t, "schemathesis", "no venv in "+dir+": run scripts/schemathesis.sh")
	}

	log := &successLog{}
	f := newFixture(t, log.wrap)
	// Something to read and lease: a run of alpha with pending trials and
	// a finished one of beta.
	f.submit(alphaEditor, modelSpec("alpha-run", "ALPHA_KEY", "a1", "a2"))
	f.seedBeta()

	passes := []struct {
		name, token string
		args        []string
	}{
		{"editor", alphaEditor, []string{"--exclude-path-regex", "^/v1/worker/"}},
		{"worker", workerTok, []string{"--include-path-regex", "^/v1/worker/"}},
	}
	for _, p := range passes {
		t.Run(p.name, func(t *testing.T) {
			before := f.state()
			log.reset()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			args := append([]string{filepath.Join(dir, "run.py"), "run", f.url + api.PathOpenAPI,
				"--header", "Authorization: Bearer " + p.token,
				// The documented contract; positive_data_acceptance
				// is left out: a schema-valid spec object is rarely a
				// valid run spec, and the server rightly says 400.
				"--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method,ignored_auth",
				"--phases", "examples,coverage,fuzzing",
				"--max-examples", "40", "--seed", "17", "--workers", "2",
				"--request-timeout", "30", "--generation-database", "none",
				"--no-color", "--output-truncate", "false",
			}, p.args...)
			cmd := exec.CommandContext(ctx, python, args...)
			cmd.Dir = t.TempDir()
			cmd.Env = append(os.Environ(), "SCHEMATHESIS_TELEMETRY=false")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("schemathesis %s failed (%v):\n%s", strings.Join(args, " "), err, out)
			}
			t.Logf("schemathesis:\n%s", tail(out, 40))
			log.check(t, before, f.state())
		})
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// successLog records the 2xx responses the server sent: the writes a run
// may have made are exactly theirs.
type successLog struct {
	mu  sync.Mutex
	all []success
}

type success struct {
	method, path string
	status       int
	body         []byte
}

func (l *successLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = nil
}

func (l *successLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if rec.status < 300 && r.Method != http.MethodGet && r.Method != http.MethodHead {
			l.mu.Lock()
			l.all = append(l.all, success{r.Method, r.URL.Path, rec.status, rec.body.Bytes()})
			l.mu.Unlock()
		}
	})
}

type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 1<<20 {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

var workerWrite = regexp.MustCompile(`^/v1/worker/trials/([^/]+)/(heartbeat|events|finish)$`)

// check compares the state before and after a pass against the 2xx
// responses logged: a new run must be one a 201 returned; a changed or new
// attempt must belong to such a run or to one a 200 cancel returned, or be
// one a lease returned or a 2xx worker write named; a changed file must be
// a promoted dataset a 200 promote added to. Anything else was written by
// a refused request.
func (l *successLog) check(t *testing.T, before, after map[string]string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	created, touched, promoted, cancelled := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	counts := map[string]int{}
	for _, s := range l.all {
		counts[s.method+" "+s.path]++
		switch {
		case s.method == "POST" && s.path == "/v1/runs" && s.status == http.StatusCreated:
			var run api.Run
			if err := json.Unmarshal(s.body, &run); err != nil || run.ID == "" {
				t.Errorf("a 201 from submit without a run: %s", s.body)
			}
			created[run.ID] = true
		case s.path == "/v1/worker/lease" && s.status == http.StatusOK:
			var lease api.Lease
			if err := json.Unmarshal(s.body, &lease); err != nil || lease.TrialID == "" {
				t.Errorf("a 200 from lease without a lease: %s", s.body)
			}
			touched[lease.TrialID] = true
		case strings.HasSuffix(s.path, "/cancel") && s.status == http.StatusOK:
			// A cancel writes the run's unfinished attempts (cancelled).
			var run api.Run
			if err := json.Unmarshal(s.body, &run); err != nil || run.ID == "" {
				t.Errorf("a 200 from cancel without a run: %s", s.body)
			}
			cancelled[run.ID] = true
		case workerWrite.MatchString(s.path):
			touched[workerWrite.FindStringSubmatch(s.path)[1]] = true
		case strings.HasSuffix(s.path, "/promote"):
			var res api.PromoteResult
			if err := json.Unmarshal(s.body, &res); err != nil {
				t.Errorf("a 200 from promote without a result: %s", s.body)
			}
			if res.Added > 0 {
				promoted["file "+res.Path] = true
			}
		}
	}
	t.Logf("successful writes: %v", counts)
	for k, v := range after {
		if before[k] == v {
			continue
		}
		kind, id, _ := strings.Cut(k, " ")
		ok := false
		switch kind {
		case "run":
			ok = created[id]
		case "attempt":
			run, _, _ := strings.Cut(strings.TrimPrefix(v, "run="), " ")
			ok = created[run] || touched[id] || cancelled[run]
		case "file":
			ok = promoted[k]
		}
		if !ok {
			t.Errorf("no successful request accounts for %s:\n before: %q\n after:  %q", k, before[k], v)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s was removed", k)
		}
	}
}

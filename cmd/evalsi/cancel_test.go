package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/api"
	"evals.si/apiclient"
)

// TestServerRunsCancel: `evalsi runs cancel RUN --server URL` cancels a
// run a real worker holds a trial of (its model call never answers until
// the worker lets go of it) and says what became of its trials; a second
// cancel says the run had ended; --json prints the run; what it refuses
// (no --server, --store, no RUN, an unknown run) is a usage error.
func TestServerRunsCancel(t *testing.T) {
	inCall := make(chan struct{}, 16)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inCall <- struct{}{}:
		default:
		}
		// net/http notices a client hanging up (and cancels r's context)
		// only once the request body is read.
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
			http.Error(w, "the test's model never answers", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(model.Close)

	s := startServer(t)
	t.Setenv("EVALSI_TOKEN", editorToken)
	c, err := apiclient.New(s.url, editorToken)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(t.TempDir(), "held.yaml")
	body := fmt.Sprintf("name: held\ndataset:\n  records:\n    - {id: a, input: q, expected: \"yes\"}\n"+
		"target: {connector: openai, model: m, base_url: %q, api_key_env: CLI_MODEL_KEY}\nevaluators: [exact-match]\n", model.URL+"/v1")
	if err := os.WriteFile(specPath, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// Submitted detached: --server's run follows it, and a cancel, which
	// ends it, is this test's to make.
	ctx, stopFollowing := context.WithCancel(context.Background())
	defer stopFollowing()
	junit := filepath.Join(t.TempDir(), "junit.xml")
	followed := make(chan result, 1)
	go func() { followed <- cli(ctx, "run", "-f", specPath, "--server", s.url, "--junit", junit) }()
	select {
	case <-inCall:
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker made no model call within 2 minutes")
	}
	runs, err := c.Runs(context.Background(), 1, "")
	if err != nil || len(runs.Runs) != 1 || runs.Runs[0].Status != api.RunRunning {
		t.Fatalf("runs on the server: %+v, %v; want the held run, running", runs, err)
	}
	id := runs.Runs[0].ID

	r := cli(context.Background(), "runs", "cancel", id, "--server", s.url)
	if r.code != 0 || !strings.Contains(r.stdout, "run "+id+" cancelled") || !strings.Contains(r.stdout, "1 cancelled") {
		t.Fatalf("runs cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The run it followed ends cancelled: not a success.
	select {
	case fr := <-followed:
		if fr.code != 130 || !strings.Contains(fr.stderr, "was cancelled") {
			t.Errorf("the followed run after the cancel: exit %d, want 130\n%s%s", fr.code, fr.stdout, fr.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("`evalsi run --server` still followed the run 2 minutes after its cancel")
	}
	// Its JUnit report skips the cancelled trial: not a pass, a failure
	// or an error.
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Errors   int `xml:"errors,attr"`
			Skipped  int `xml:"skipped,attr"`
			Cases    []struct {
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if b, err := os.ReadFile(junit); err != nil || xml.Unmarshal(b, &suites) != nil || len(suites.Suites) != 1 {
		t.Errorf("the JUnit report of the cancelled run: %v\n%s", err, b)
	} else if su := suites.Suites[0]; su.Tests != 1 || su.Skipped != 1 || su.Failures+su.Errors != 0 || len(su.Cases) != 1 || su.Cases[0].Skipped == nil {
		t.Errorf("the JUnit report of the cancelled run: %s; want its one trial skipped", b)
	}

	r = cli(context.Background(), "runs", "cancel", id, "--server", s.url)
	if r.code != 0 || !strings.Contains(r.stdout, "had already ended cancelled") {
		t.Errorf("a second runs cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = cli(context.Background(), "runs", "cancel", id, "--server", s.url, "--json")
	var run api.Run
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &run) != nil || run.ID != id || run.Status != api.RunCancelled || run.Summary == nil {
		t.Errorf("runs cancel --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, u := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "cancel", id}, "give --server URL"},
		{[]string{"runs", "cancel", id, "--server", s.url, "--store", "x.db"}, "--store cannot be used with --server"},
		{[]string{"runs", "cancel", "--server", s.url}, "needs one RUN"},
		{[]string{"runs", "cancel", "r-no-such-run", "--server", s.url}, "no run r-no-such-run"},
	} {
		r := cli(context.Background(), u.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, u.want) {
			t.Errorf("%v: exit %d, want 2 naming %q\n%s", u.args, r.code, u.want, r.stderr)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
)

// TestInterruptMarksRunInterrupted cancels a run (as Ctrl-C does) while
// its model answers slowly: the run ends "interrupted", exit 130, and
// trials that did not finish stay unfinished for a resume.
func TestInterruptMarksRunInterrupted(t *testing.T) {
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4"}}}, slog.Default())
	calls := make(chan struct{}, 100)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- struct{}{}
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		srv.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: slow}
	go hs.Serve(ln)
	defer hs.Close()

	var recs strings.Builder
	for i := range 20 {
		fmt.Fprintf(&recs, "    - {id: q%d, input: \"2+2?\", expected: \"4\"}\n", i)
	}
	dir := t.TempDir()
	specPath := filepath.Join(dir, "slow.yaml")
	os.WriteFile(specPath, []byte(`name: slow
concurrency: 2
dataset:
  records:
`+recs.String()+`target:
  connector: openai
  model: gpt-4o-mini
  base_url: http://`+ln.Addr().String()+`/v1
evaluators: [exact-match]
`), 0o644)
	t.Setenv("OPENAI_API_KEY", "test-key-not-secret")

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-calls
		<-calls
		cancel()
	}()
	db := filepath.Join(dir, "db")
	var out, errb bytes.Buffer
	code := run(ctx, []string{"run", "--store", db, "-f", specPath, "--json"}, &out, &errb)
	if code != 130 {
		t.Fatalf("exit %d, want 130\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	var sum struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Status != "interrupted" {
		t.Fatalf("summary %s (%v), want status interrupted", out.String(), err)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.GetRun(context.Background(), sum.RunID)
	if err != nil || r.Status != store.RunInterrupted {
		t.Fatalf("stored run = %+v, %v", r, err)
	}
	trials, err := st.ListTrials(context.Background(), sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	// Every trial is queued at submit; an interrupted run leaves most of
	// them pending, never started.
	started := 0
	for _, tr := range trials {
		if tr.Status != store.TrialPending {
			started++
		}
	}
	if len(trials) != 20 || started >= 20 {
		t.Errorf("%d trials queued, %d started although the run was interrupted early", len(trials), started)
	}
	for _, tr := range trials {
		if tr.Status == store.TrialErrored {
			t.Errorf("trial %s errored on interrupt (%s); it should stay unfinished", tr.RecordID, tr.Error)
		}
	}
}

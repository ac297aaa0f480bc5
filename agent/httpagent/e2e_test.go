package httpagent_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/trajectory"
)

// runExample runs examples/agents/<name> through embedded.App with from
// (the example's URL) replaced by to (the test peer's) and every edit
// applied, and returns the summary scores and the first trial's events.
func runExample(t *testing.T, name, from, to string, edits ...[2]string) (map[string]float64, []trajectory.Event) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "the task's checker runs in a bubblewrap sandbox")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "agents", name))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	if !strings.Contains(y, from) {
		t.Fatalf("%s does not contain %q", name, from)
	}
	y = strings.ReplaceAll(y, from, to)
	for _, e := range edits {
		if !strings.Contains(y, e[0]) {
			t.Fatalf("%s does not contain %q", name, e[0])
		}
		y = strings.ReplaceAll(y, e[0], e[1])
	}
	dir := t.TempDir()
	f, err := spec.Parse(filepath.Join(dir, name), []byte(y))
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, y)
	}
	f.Dir = dir
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	d, err := app.RunDetail(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 0 || len(d.Trials) == 0 {
		for _, tr := range d.Trials {
			t.Logf("trial %s: %s %s", tr.RecordID, tr.Status, tr.Error)
		}
		t.Fatalf("%d trial(s) errored: %v", sum.Errored, sum.ErrorsByKind)
	}
	evs, err := app.Store().Events(ctx, d.Trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sum.Scores, evs
}

// capitalAgent answers examples/agents/http.yaml's request shape.
func capitalAgent(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Question string `json:"question"`
			Session  string `json:"session"`
		}
		if err := json.Unmarshal(b, &req); err != nil || r.URL.Path != "/run" || req.Session == "" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		answer := "I do not know."
		if strings.Contains(req.Question, "capital of France") {
			answer = "Paris"
		}
		writeJSON(w, map[string]any{"output": map[string]any{"text": answer}, "steps": []any{
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c1", "name": "atlas", "arguments": map[string]any{"country": "France"}}}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "name": "atlas", "content": "capital: Paris"},
			map[string]any{"role": "assistant", "content": answer},
		}})
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestHTTPExampleEndToEnd: examples/agents/http.yaml against a loopback
// agent. The answer is graded by includes, and the task's environment is
// built and checked in the sandbox: with a checker that fails, the same
// answer leaves task-success at 0.
func TestHTTPExampleEndToEnd(t *testing.T) {
	ts := capitalAgent(t)
	scores, evs := runExample(t, "http.yaml", "http://127.0.0.1:8090", ts.URL)
	if scores["includes"] != 1 || scores["task-success"] != 1 {
		t.Errorf("scores = %v, want includes 1 and task-success 1", scores)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, string(e.Kind))
	}
	got := strings.Join(kinds, ",")
	for _, want := range []string{"message,message,tool_call,tool_result,message,stop", "checker"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %s lack %s", got, want)
		}
	}

	scores, _ = runExample(t, "http.yaml", "http://127.0.0.1:8090", ts.URL, [2]string{"test -s notes.txt", "test -s missing.txt"})
	if scores["includes"] != 1 || scores["task-success"] != 0 {
		t.Errorf("with a failing checker: scores = %v, want includes 1 and task-success 0", scores)
	}
}

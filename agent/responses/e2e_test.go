package responses_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/modelserver"
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

// TestResponsesExampleEndToEnd: examples/agents/responses.yaml against the
// scripted model server with examples/agents/responses-script.yaml: the
// answer is graded by includes, usage reaches agent-efficiency, and the
// task's environment is built and checked.
func TestResponsesExampleEndToEnd(t *testing.T) {
	script, err := modelserver.LoadScript(filepath.Join("..", "..", "examples", "agents", "responses-script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ms := modelserver.New(script, nil)
	ts := httptest.NewServer(ms)
	defer ts.Close()
	scores, evs := runExample(t, "responses.yaml", "http://127.0.0.1:8089/v1", ts.URL+"/v1")
	if scores["includes"] != 1 || scores["task-success"] != 1 || scores["agent-tokens"] <= 0 || scores["agent-steps"] != 1 {
		t.Errorf("scores = %v, want includes 1, task-success 1, agent-tokens > 0, agent-steps 1", scores)
	}
	if n := len(ms.Requests()); n != 1 {
		t.Errorf("%d requests to the model server, want 1", n)
	}
	var checked bool
	for _, e := range evs {
		checked = checked || (e.Kind == trajectory.KindChecker && e.Checker.Pass)
	}
	if !checked {
		t.Errorf("no passing checker event in %d events", len(evs))
	}
}

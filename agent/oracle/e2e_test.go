package oracle_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/benchimage"
	"evals.si/spec"
)

func benchdata(t *testing.T, sub string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "benchdata", sub))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "benchdata", p+" is not there")
	}
	return p
}

// runSpec runs a spec in a fresh embedded app and returns its summary.
func runSpec(t *testing.T, yaml string) map[string]float64 {
	t.Helper()
	dir := t.TempDir()
	f, err := spec.Parse(filepath.Join(dir, "spec.yaml"), []byte(yaml))
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, yaml)
	}
	f.Dir = dir
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	app, err := embedded.Open(context.Background(), embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sum, err := app.Run(context.Background(), f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if sum.Errored != 0 {
		d, _ := app.RunDetail(context.Background(), sum.RunID)
		for _, tr := range d.Trials {
			t.Logf("trial %s: %s %s", tr.RecordID, tr.Status, tr.Error)
		}
		t.Fatalf("%d trial(s) errored: %v", sum.Errored, sum.ErrorsByKind)
	}
	return sum.Scores
}

func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bubblewrap is not installed")
	}
}

// TestOracleHarborHelloWorkdir: the oracle's solve.sh passes Harbor's
// verifier, with the task's ubuntu:24.04 mirrored to the local image.
func TestOracleHarborHelloWorkdir(t *testing.T) {
	requireBwrap(t)
	img := benchimage.Ref(t, "../..")
	dir := benchdata(t, "harbor")
	scores := runSpec(t, `
dataset: {uri: "harbor://`+dir+`?tasks=hello-workdir&network=deny"}
target: {agent: {oracle: {}}}
evaluators: [{name: task-success}]
environment:
  image_mirrors: {"ubuntu:24.04": "`+img+`"}
  sandbox: {ladder: [bwrap]}
`)
	if scores["task-success"] != 1 {
		t.Errorf("task-success = %v, want 1 (scores %v)", scores["task-success"], scores)
	}
}

// TestOracleTerminalBenchTranspose: the oracle decrypts the reference
// solution and Terminal-Bench's run-tests.sh passes under its pytest
// parser. image= stands for the built Dockerfile (its RUN steps need the
// network; the local image has what they install).
func TestOracleTerminalBenchTranspose(t *testing.T) {
	requireBwrap(t)
	img := benchimage.Ref(t, "../..")
	dir := benchdata(t, "terminal-bench")
	scores := runSpec(t, `
dataset: {uri: "terminal-bench://`+dir+`?tasks=polyglot_python_transpose&network=deny&image=`+img+`"}
target: {agent: {oracle: {}}}
evaluators: [{name: task-success}]
environment:
  sandbox: {ladder: [bwrap]}
`)
	if scores["task-success"] != 1 {
		t.Errorf("task-success = %v, want 1 (scores %v)", scores["task-success"], scores)
	}
}

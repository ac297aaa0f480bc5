package peers_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/modelserver"
	"evals.si/spec"
)

// The MCP and HTTP examples run as shipped against the peers shipped with
// them: each peer is built and started as its own process on loopback,
// asking the scripted model server (examples/agents/model-server/
// peer-agents.yaml) over the OpenAI wire format, and the example runs
// through the embedded engine with its sandbox and checker. Only the peer's
// address in the example is rewritten (the test listens on port 0).
func TestPeerExamples(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bubblewrap is not installed (the examples' checker runs in a sandbox)")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script, err := modelserver.LoadScript(filepath.Join(root, "examples", "agents", "model-server", "peer-agents.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ms := modelserver.New(script, nil)
	maddr, err := ms.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	bin := t.TempDir()
	for _, tc := range []struct {
		peer, example, address string
	}{
		{"mcp-agent", "mcp.yaml", "127.0.0.1:8931"},
		{"http-agent", "http.yaml", "127.0.0.1:8090"},
	} {
		t.Run(tc.peer, func(t *testing.T) {
			exe := filepath.Join(bin, tc.peer)
			build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./examples/agents/peers/"+tc.peer)
			build.Dir = root
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", tc.peer, err, out)
			}
			addr := startPeer(t, ctx, exe, "-listen", "127.0.0.1:0", "-base-url", "http://"+maddr.String()+"/v1", "-model", "scripted")

			data, err := os.ReadFile(filepath.Join(root, "examples", "agents", tc.example))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tc.address) {
				t.Fatalf("%s no longer names %s; update the test", tc.example, tc.address)
			}
			specPath := filepath.Join(t.TempDir(), tc.example)
			if err := os.WriteFile(specPath, []byte(strings.ReplaceAll(string(data), tc.address, addr)), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := spec.Load(specPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			sum, err := app.Run(ctx, f, embedded.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Errored != 0 {
				d, _ := app.RunDetail(ctx, sum.RunID)
				for _, tr := range d.Trials {
					t.Logf("trial %s: %s %s", tr.RecordID, tr.ErrorKind, tr.Error)
				}
				t.Fatalf("%d trials errored", sum.Errored)
			}
			// The checker passed in the sandbox, and the peer's answer (the
			// model's "Paris") reached the includes evaluator.
			if sum.Scores["task-success"] != 1 || sum.Scores["includes"] != 1 {
				t.Errorf("scores %v, want task-success 1 and includes 1", sum.Scores)
			}
			asked := false
			for _, r := range ms.Requests() {
				asked = asked || strings.Contains(string(r.Body), "capital of France")
			}
			if !asked {
				t.Errorf("the model server never saw the question; requests: %d", len(ms.Requests()))
			}
		})
	}
}

// startPeer starts a peer and returns the address it printed on its first
// line of output; the peer is stopped when the test ends.
func startPeer(t *testing.T, ctx context.Context, exe string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s printed no address: %v", exe, err)
	}
	// "<peer>: serving http://ADDR/path (…)"
	_, rest, ok := strings.Cut(line, "http://")
	addr, _, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		t.Fatalf("%s: cannot read the address from %q", exe, line)
	}
	return addr
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv/pgtest"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	pgtest.Main(m)
}

func TestProbeJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"sandbox", "probe", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var probes []struct {
		Rung      string `json:"rung"`
		Works     bool   `json:"works"`
		Isolation string `json:"isolation"`
		Reason    string `json:"reason"`
	}
	if err := json.Unmarshal(out.Bytes(), &probes); err != nil {
		t.Fatalf("not the documented JSON: %v\n%s", err, out.String())
	}
	seen := map[string]bool{}
	for _, p := range probes {
		seen[p.Rung] = true
		if !p.Works && p.Reason == "" {
			t.Errorf("%s does not work but gives no reason", p.Rung)
		}
		if p.Isolation == "" {
			t.Errorf("%s has no isolation level", p.Rung)
		}
	}
	for _, r := range []string{"firecracker", "smolvm", "bwrap", "landlock", "docker", "host"} {
		if !seen[r] {
			t.Errorf("probe does not report %s: %s", r, out.String())
		}
	}
}

// pipeWriter lets the test read the server's stdout line while it runs.
type pipeWriter struct{ w *io.PipeWriter }

func (p pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }

func TestModelServerCommand(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(script, []byte("default:\n  - content: hello from the script\n"), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"model-server", "--script", script, "--listen", "127.0.0.1:0"}, pipeWriter{pw}, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address: %v", err)
	}
	base := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello from the script") {
		t.Fatalf("status %d body %s", resp.StatusCode, b)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after cancel", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("model-server did not stop when its context ended")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"model-server"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("evalsid %v: exit %d, want 2", args, code)
		}
	}
}

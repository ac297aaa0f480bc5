// Package jaegertest runs a real Jaeger (the v2 binary scripts/build-jaeger.sh
// builds and caches) for a test: in-memory storage, an OTLP/HTTP receiver and
// the query API, each on a free 127.0.0.1 port, from a config file of the
// test's own. Nothing listens on another address. Test support only.
package jaegertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
)

// config enables only what the tests use; every listener is given, as
// Jaeger's defaults (query on :16686, :16685) bind all interfaces. No batch
// processor: spans are stored as they arrive. Collector self-telemetry is
// off, which also keeps its Prometheus endpoint (:8888) closed, and so is
// the query service's tracing of itself (on by default, exporting to
// localhost:4317).
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// Start runs Jaeger until the test ends and returns its OTLP/HTTP endpoint
// (http://127.0.0.1:P, the value for OTEL_EXPORTER_OTLP_ENDPOINT) and its
// query API's base URL (http://127.0.0.1:Q, a traces dataset's url).
// A machine without the cached binary reports the facility missing (a
// failure under EVALSI_STRICT=1).
func Start(t testing.TB) (otlpHTTP, query string) {
	t.Helper()
	bin := binary(t)
	queryPort, grpcPort, otlpPort := freePort(t), freePort(t), freePort(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, queryPort, grpcPort, otlpPort), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Dir = dir
	// Not the test's environment: a test that points OTEL_* at this Jaeger
	// must not make Jaeger export to itself.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir}
	cmd.Stdout, cmd.Stderr = logs, logs
	// Its own process group, so cleanup stops whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("jaeger's log:\n%s", logs.String())
		}
	})
	otlpHTTP = fmt.Sprintf("http://127.0.0.1:%d", otlpPort)
	query = fmt.Sprintf("http://127.0.0.1:%d", queryPort)
	waitReady(t, exited, logs, query, otlpPort)
	return otlpHTTP, query
}

// binary finds the cached Jaeger through the build script's --cached mode:
// building it downloads modules, which a test must not do.
func binary(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(moduleRoot(t), "scripts", "build-jaeger.sh"), "--cached")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		testenv.Missing(t, "jaeger", "the binary is not built (run bash scripts/build-jaeger.sh; .ci/setup does): "+err.Error()+"\n"+stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("build-jaeger.sh printed %q, which is not an executable", bin)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitReady waits until the query API answers and the OTLP receiver
// accepts connections, or Jaeger exits. The bound is generous: it is for a
// Jaeger that never comes up, not a measure of speed.
func waitReady(t testing.TB, exited <-chan error, logs *syncBuffer, query string, otlpPort int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		if ready(ctx, query, otlpPort) {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited before it was ready (%v); its log:\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("jaeger was not ready after 2 minutes; its log:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ready(ctx context.Context, query string, otlpPort int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, query+"/api/v3/services", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", otlpPort), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// syncBuffer collects Jaeger's output, written by exec's copier while a
// failing test may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestProbesOfServeAndWorker proves the real processes serve their probes
// with no token: `evalsid serve` answers /healthz, /readyz and /metrics on
// its API port, and `evalsid worker --metrics-listen` answers them on its
// own, its /readyz turning 200 once it has reached the server, its
// /metrics parsable as Prometheus parses them.
func TestProbesOfServeAndWorker(t *testing.T) {
	s := newServerSetup(t)
	s.Serve(t)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := probeGet(t, s.URL+p); code != http.StatusOK {
			t.Errorf("serve %s: %d %s", p, code, body)
		}
	}
	addr := probeAddr(t)
	s.Start(t, "worker-m", []string{"EVALSI_TOKEN=" + workerToken}, "worker", "--server", s.URL, "--name", "worker-m",
		"--state-dir", filepath.Join(s.Dir, "worker-m-state"), "--metrics-listen", addr)
	base := "http://" + addr
	// Waiting with a deadline for the worker to start and lease once; no
	// timing is asserted.
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := probeGet(t, base+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's /readyz never turned 200: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _ := probeGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("worker /healthz: %d", code)
	}
	code, body := probeGet(t, base+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if code != http.StatusOK || err != nil {
		t.Fatalf("worker /metrics: %d %v\n%s", code, err, body)
	}
	for _, name := range []string{"evalsid_worker_trials_leased_total", "evalsid_worker_trials_finished_total", "evalsid_worker_trials_running", "evalsid_worker_lease_losses_total"} {
		if fams[name] == nil {
			t.Errorf("worker /metrics has no %s", name)
		}
	}
}

// probeGet returns a response's status and body, or 0 when nothing answers.
func probeGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// probeAddr picks a free loopback port (released for the process to take).
func probeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}

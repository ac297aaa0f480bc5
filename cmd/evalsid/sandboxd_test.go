package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/store/postgres"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// `evalsid sandboxd` and `evalsid worker --config worker.yaml` (sandbox:
// address, ca, cert, key) against the real server: fix-calc-offline runs to
// a pass with every sandbox leased from the pool over mutual TLS, and the
// worker makes none itself.
func TestSandboxdWorkerRunsFixCalc(t *testing.T) {
	bwraptest.Rung(t) // the pool's rung
	s := newServerSetup(t)
	s.Serve(t)
	dir := t.TempDir()
	serverCA, clientCA := pooltest.NewCA(t, "pool-ca"), pooltest.NewCA(t, "client-ca")
	poolCert, poolKey := pooltest.WriteFiles(t, pooltest.Issue(t, serverCA, "sandboxd", true), dir, "pool")
	workerCert, workerKey := pooltest.WriteFiles(t, pooltest.Issue(t, clientCA, "worker-pool", false), dir, "worker")
	for name, pem := range map[string][]byte{"pool-ca.crt": serverCA.PEM, "client-ca.crt": clientCA.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), pem, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr, health := freeAddr(t), freeAddr(t)
	s.Start(t, "sandboxd", nil, "sandboxd", "--listen", addr, "--health-listen", health,
		"--tls-cert", poolCert, "--tls-key", poolKey, "--client-ca", filepath.Join(dir, "client-ca.crt"),
		"--state-dir", filepath.Join(dir, "pool-state"), "--rung", "bwrap", "--allow-host-root", "--max-pids", "256", "--max-command-timeout", "5m")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + health + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd did not come up: %v", err)
		}
	}
	// The API is not served in the clear.
	if resp, err := http.Get("http://" + addr + "/v1/pool"); err == nil {
		if resp.StatusCode == http.StatusOK {
			t.Errorf("the pool's API answered plain HTTP")
		}
		resp.Body.Close()
	}
	cfg := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("sandbox:\n  address: %s\n  ca: pool-ca.crt\n  cert: %s\n  key: %s\n", addr, filepath.Base(workerCert), filepath.Base(workerKey))), 0o644); err != nil {
		t.Fatal(err)
	}
	workerState := filepath.Join(dir, "worker-state")
	s.Start(t, "worker-pool", []string{"EVALSI_TOKEN=" + workerToken}, "worker", "--server", s.URL, "--name", "worker-pool",
		"--slots", "2", "--state-dir", workerState, "--config", cfg)

	f, err := spec.Load("../../examples/agents/fix-calc-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(t)
	run, err := c.Submit(context.Background(), "fix-calc-offline.yaml", f.Spec, "")
	if err != nil {
		t.Fatal(err)
	}
	sum := follow(t, c, run.ID)
	if sum.Errored != 0 || sum.Scores["task-success"] != 1 {
		t.Fatalf("fix-calc-offline through the pool: errored %d, scores %v; want a pass", sum.Errored, sum.Scores)
	}
	// The trial's isolation is the pool's bwrap, leased.
	blobs, err := store.OpenFSBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(context.Background(), s.DSN, blobs)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trials, err := st.ListTrials(context.Background(), run.ID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials %v, %v", trials, err)
	}
	var rep sandbox.Report
	if err := json.Unmarshal(trials[0].Isolation, &rep); err != nil {
		t.Fatalf("isolation report %s: %v", trials[0].Isolation, err)
	}
	if rep.Rung != sandbox.RungBwrap || !strings.Contains(strings.Join(rep.Notes, "\n"), "leased from the sandbox pool at "+addr) {
		t.Errorf("isolation report %+v; want the pool's bwrap rung, leased", rep)
	}
	// The spec sets no pids_max: the trial ran under the pool's --max-pids,
	// and its command_timeout (2m) within --max-command-timeout.
	if !strings.Contains(strings.Join(rep.Limits, " "), "pids.max=256") || !strings.Contains(strings.Join(rep.Notes, "\n"), "pids_max=256: the sandbox pool's maximum") ||
		!slices.Contains(rep.Limits, "timeout=2m0s") {
		t.Errorf("isolation report limits %q, notes %q; want the pool's pids max of 256 and the spec's timeout of 2m", rep.Limits, rep.Notes)
	}
	// The worker made no sandbox of its own: nothing of a sandbox's state
	// is in its state directory.
	filepath.WalkDir(workerState, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "sb-") || strings.Contains(p, "bwrap") {
			t.Errorf("the worker holds sandbox state: %s", p)
		}
		return nil
	})
}

// sandboxd without its TLS files, and a worker whose sandbox pool lacks a
// certificate or whose config is misspelt, are usage errors (exit 2) that
// say what is missing.
func TestSandboxdUsageErrors(t *testing.T) {
	t.Setenv("EVALSI_TOKEN", "tok-usage-0123456789")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("sandbox:\n  adress: 127.0.0.1:1\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"sandboxd without TLS", []string{"sandboxd", "--listen", "127.0.0.1:0", "--state-dir", dir}, "--tls-cert"},
		{"sandboxd with --max-requests 0", []string{"sandboxd", "--listen", "127.0.0.1:0", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--state-dir", dir, "--max-requests", "0"}, "--max-requests 0"},
		{"sandboxd with an unknown rung", []string{"sandboxd", "--listen", "127.0.0.1:0", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--state-dir", dir, "--rung", "docker"}, "bwrap, landlock, firecracker, qemu or pod"},
		{"worker pool without a certificate", []string{"worker", "--server", "http://127.0.0.1:1", "--sandbox-address", "127.0.0.1:1"}, "sandbox.cert"},
		{"worker config misspelt", []string{"worker", "--server", "http://127.0.0.1:1", "--config", bad}, "adress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if code := run(t.Context(), tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"evals.si/apiclient"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/kubetest"
	"evals.si/internal/testenv/servertest"
	"evals.si/k8s/apis/v1alpha1"
	"evals.si/k8s/controller"
)

// These tests run the reconcilers in the test process against a real
// apiserver (kubetest's control plane; no node), and the EvalRun ones
// against a real `evalsid serve` with a real `evalsid worker` running
// sandboxes in bubblewrap.

func TestMain(m *testing.M) {
	// controller-runtime's package logger (the tests' managers log through
	// their own); unset, it prints a warning with a stack.
	ctrl.SetLogger(logr.Discard())
	kubetest.Main(m)
}

func scheme(t testing.TB) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// cluster is the shared control plane with the CRDs installed, and a
// client and namespace of the test's own.
func cluster(t *testing.T) (*kubetest.Cluster, client.Client, string) {
	t.Helper()
	c := kubetest.Shared(t, kubetest.Options{})
	crds := filepath.Join("..", "..", "deploy", "crds")
	c.Kubectl(t, "apply", "-f", filepath.Join(crds, "evals.si_evalruns.yaml"), "-f", filepath.Join(crds, "evals.si_sandboxclasses.yaml"))
	c.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/evalruns.evals.si", "crd/sandboxclasses.evals.si")
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c, cl, c.Namespace(t)
}

// operator is a running manager with both reconcilers, watching ns only
// (tests run in parallel namespaces); stop stops it and waits.
type operator struct{ stop func() }

func startOperator(t *testing.T, c *kubetest.Cluster, ns string) *operator {
	t.Helper()
	s := scheme(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mgr, err := ctrl.NewManager(c.RESTConfig, manager.Options{
		Scheme:                 s,
		Logger:                 logr.FromSlogHandler(log.Handler()),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// Several managers of one test binary register the same
		// controller names; each is its own.
		Controller: ctrlConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	er := &controller.EvalRunReconciler{Client: mgr.GetClient(), Secrets: mgr.GetAPIReader(), Scheme: s, Dial: controller.DialAPI,
		Log: log, Poll: 200 * time.Millisecond, MaxPoll: time.Second, CancelFor: 5 * time.Second}
	if err := er.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	sc := &controller.SandboxClassReconciler{Client: mgr.GetClient(), Log: log}
	if err := sc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped bool
	o := &operator{stop: func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the operator stopped with %v", err)
		}
	}}
	t.Cleanup(o.stop)
	return o
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// evalServer is a running `evalsid serve` (SQLite store) and, if asked,
// one worker.
type evalServer struct {
	URL, Token string
	client     *apiclient.Client
}

const (
	opToken     = "tok-k8s-operator-0123456789"
	workerToken = "tok-k8s-worker-0123456789"
)

func startServer(t *testing.T, withWorker bool) *evalServer {
	t.Helper()
	if withWorker {
		for _, bin := range []string{"bwrap", "git"} {
			if _, err := exec.LookPath(bin); err != nil {
				testenv.Missing(t, bin, bin+" is not installed (the worker runs fix-calc-offline in bubblewrap)")
			}
		}
		if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
			testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
		}
	}
	bin := servertest.Evalsid(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, d := range []string{"datasets", "blobs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "server.yaml")
	conf := fmt.Sprintf(`listen: %s
store: {sqlite: evalsi.db}
blobs_dir: blobs
datasets_dir: datasets
leases: {ttl: 5s, sweep: 500ms}
projects:
  - name: k8s
    members: [{user: op, role: editor}]
tokens:
  - {name: op, user: op, project: k8s, token_env: K8S_OP_TOKEN}
  - {name: w, service: worker, token_env: K8S_WORKER_TOKEN}
`, addr)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "K8S_OP_TOKEN="+opToken, "K8S_WORKER_TOKEN="+workerToken)
	start(t, bin, dir, "server", env, "serve", "--config", cfg)
	url := "http://" + addr
	waitFor(t, "the server to answer /healthz", func() (bool, error) {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if withWorker {
		start(t, bin, dir, "worker", append(env, "EVALSI_TOKEN="+workerToken), "worker", "--server", url, "--name", "w1", "--slots", "2",
			"--state-dir", filepath.Join(dir, "w1-state"))
	}
	cl, err := apiclient.New(url, opToken)
	if err != nil {
		t.Fatal(err)
	}
	return &evalServer{URL: url, Token: opToken, client: cl}
}

// start runs evalsid with args, logging to <dir>/<name>.log (shown when
// the test fails), stopped at cleanup.
func start(t *testing.T, bin, dir, name string, env []string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s log:\n%s", name, b)
		}
	})
}

// waitFor polls cond until it holds (kubetest.WaitFor, 4 minutes).
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	kubetest.WaitFor(t, what, 4*time.Minute, cond)
}

func ctrlConfig() config.Controller {
	skip := true
	return config.Controller{SkipNameValidation: &skip}
}

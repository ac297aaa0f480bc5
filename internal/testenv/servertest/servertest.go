// Package servertest runs the real server for tests: the evalsid binary
// (built once per test binary), `evalsid serve` on a PostgreSQL of the
// test's own (internal/testenv/pgtest) on a fixed loopback port, so a
// restarted server is found where its workers look, and `evalsid worker`
// processes. Each process's output goes to a log file in the test's
// directory, shown when the test fails. Test support only.
//
// A package that uses it calls pgtest.Main from its TestMain.
package servertest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv/pgtest"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Evalsid builds cmd/evalsid once per test binary and returns its path.
func Evalsid(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "evalsid-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "evalsid")
		cmd := exec.Command("go", "build", "-o", builtBin, "evals.si/cmd/evalsid")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building evalsid: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// Options describe a server.
type Options struct {
	// Config is server.yaml after its listen, store, blobs_dir and
	// datasets_dir lines (leases, projects, tokens, grants, ...).
	Config string
	// Dirs, when set, replaces the blobs_dir and datasets_dir lines (with
	// S3 locations and their storage: section, say).
	Dirs string
	// Env is added to every process's environment (the tokens the config's
	// token_env names, say).
	Env []string
}

// Server is a server set up for a test; Serve starts (or restarts) it.
type Server struct {
	URL, Dir, Datasets, DSN string
	bin, cfg                string
	env                     []string
}

// New writes the server's config on a free loopback port and a fresh
// PostgreSQL database; it starts nothing.
func New(t *testing.T, o Options) *Server {
	t.Helper()
	dsn := pgtest.Start(t)
	bin := Evalsid(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	datasets := filepath.Join(dir, "datasets")
	if err := os.MkdirAll(datasets, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "server.yaml")
	dirs := "blobs_dir: blobs\ndatasets_dir: datasets\n"
	if o.Dirs != "" {
		dirs = o.Dirs
	}
	body := fmt.Sprintf("listen: %s\nstore: {postgres_env: SERVERTEST_PG_DSN}\n%s%s", addr, dirs, o.Config)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(append(os.Environ(), "SERVERTEST_PG_DSN="+dsn), o.Env...)
	return &Server{URL: "http://" + addr, Dir: dir, Datasets: datasets, DSN: dsn, bin: bin, cfg: cfg, env: env}
}

// Proc is a started evalsid process; it is stopped when the test ends.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Kill kills the process with SIGKILL and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Serve starts `evalsid serve` and waits until it answers /healthz.
func (s *Server) Serve(t *testing.T) *Proc {
	t.Helper()
	p := s.Start(t, "server", nil, "serve", "--config", s.cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			t.Fatalf("the server did not come up: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Worker starts `evalsid worker --server` named name with slots slots;
// env adds its token (EVALSI_TOKEN) and the secrets runs name.
func (s *Server) Worker(t *testing.T, name string, slots int, env ...string) *Proc {
	t.Helper()
	return s.Start(t, name, env, "worker", "--server", s.URL, "--name", name, "--slots", fmt.Sprint(slots),
		"--state-dir", filepath.Join(s.Dir, name+"-state"))
}

// Start starts evalsid with args, logging to <Dir>/<name>.log.
func (s *Server) Start(t *testing.T, name string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(append([]string{}, s.env...), env...)
	logPath := filepath.Join(s.Dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

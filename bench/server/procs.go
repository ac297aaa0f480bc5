package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Tokens of the bench's own server, which listens on loopback only and
// lives as long as the bench; they reach the processes in their
// environment, as a deployment's would.
const (
	userToken   = "tok-bench-user-0123456789"
	workerToken = "tok-bench-worker-0123456789"
)

// deployment is `evalsid serve` and its workers, as real processes.
type deployment struct {
	bin, dir, url, dsn string
	server             *process
	workers            []*process
}

// process is a started evalsid process.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// buildEvalsid builds cmd/evalsid into dir (CGO_ENABLED=0, as released);
// it needs the module's source, so run the bench from the repository.
func buildEvalsid(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "evalsid")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "evals.si/cmd/evalsid")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building evalsid (run the bench inside the repository, or give --evalsid): %w\n%s", err, out)
	}
	return bin, nil
}

// deploy writes server.yaml, starts the server and waits for /healthz,
// then starts the workers, each with slots trials at once.
func deploy(ctx context.Context, bin, dir, dsn string, workers, slots int) (*deployment, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "server.yaml")
	body := fmt.Sprintf(`listen: %s
store: {postgres_env: BENCH_PG_DSN}
blobs_dir: blobs
datasets_dir: datasets
viewer: false
projects:
  - name: bench
    members: [{user: bench, role: editor}]
tokens:
  - {name: bench, user: bench, project: bench, token_env: BENCH_USER_TOKEN}
  - {name: workers, service: worker, token_env: BENCH_WORKER_TOKEN}
`, addr)
	if err := os.MkdirAll(filepath.Join(dir, "datasets"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return nil, err
	}
	d := &deployment{bin: bin, dir: dir, url: "http://" + addr, dsn: dsn}
	if d.server, err = d.start("server", "serve", "--config", cfg); err != nil {
		return nil, err
	}
	if err := d.waitHealthy(ctx); err != nil {
		d.stop()
		return nil, err
	}
	for i := range workers {
		name := fmt.Sprintf("worker-%d", i+1)
		w, err := d.start(name, "worker", "--server", d.url, "--name", name, "--slots", strconv.Itoa(slots),
			"--state-dir", filepath.Join(dir, name+"-state"))
		if err != nil {
			d.stop()
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	return d, nil
}

// datasetsDir is the server's datasets_dir.
func (d *deployment) datasetsDir() string { return filepath.Join(d.dir, "datasets") }

func (d *deployment) start(name string, args ...string) (*process, error) {
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), "BENCH_PG_DSN="+d.dsn, "BENCH_USER_TOKEN="+userToken, "BENCH_WORKER_TOKEN="+workerToken)
	if name != "server" {
		cmd.Env = append(cmd.Env, "EVALSI_TOKEN="+workerToken)
	}
	logf, err := os.Create(filepath.Join(d.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting evalsid %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func (d *deployment) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-d.server.done:
			return fmt.Errorf("evalsid serve exited: %s", d.logTail("server"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("evalsid serve did not answer /healthz within 30s (%v): %s", err, d.logTail("server"))
		}
	}
}

// alive reports a process that has exited, with its log's tail.
func (d *deployment) alive() error {
	for _, p := range append([]*process{d.server}, d.workers...) {
		select {
		case <-p.done:
			return fmt.Errorf("evalsid %s exited (%s): %s", p.name, p.cmd.ProcessState, d.logTail(p.name))
		default:
		}
	}
	return nil
}

func (d *deployment) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(d.dir, name+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// stop ends the workers, then the server, with SIGTERM (SIGKILL after 10s).
func (d *deployment) stop() {
	for _, p := range d.workers {
		p.terminate()
	}
	if d.server != nil {
		d.server.terminate()
	}
}

func (p *process) terminate() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuTime is a process's CPU time (user + system) so far, with that of
// its children it has waited for (a worker's sandboxes), from
// /proc/PID/stat.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces; fields resume after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// utime, stime, cutime, cstime are fields 14-17 of the whole line,
	// 12-15 after the name (index 11-14).
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// treeCPU is the CPU time of a process and its live descendants: the
// postmaster and its backends, which live as long as their connections.
func treeCPU(root int) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	var sum time.Duration
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				sum += cpuTime(pid)
				break
			}
		}
	}
	return sum
}

// machineBusy is the whole machine's non-idle CPU time so far, from
// /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:8] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks
}

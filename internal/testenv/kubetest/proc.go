package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one component of the cluster (etcd, kube-apiserver, …) running as
// a child of the test binary, its output in logs/<name>.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	exit chan struct{} // closed when the process has exited
}

// spawn starts a component. Pdeathsig takes it down with the test binary
// should that die without Main's cleanup; what it started itself (containerd's
// shims, pods) the next start's sweep removes.
func (c *Cluster) spawn(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(c.dir, "logs", name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exit: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exit) }()
	c.procs = append(c.procs, p)
	return p, nil
}

// waitReady polls ready until it succeeds, the process exits or ctx ends;
// the error names the component and shows the tail of its log.
func (p *proc) waitReady(ctx context.Context, ready func(context.Context) error) error {
	var err error
	for {
		if err = ready(ctx); err == nil {
			return nil
		}
		select {
		case <-p.exit:
			return fmt.Errorf("%s exited at start (%v); the end of its log %s:\n%s", p.name, p.cmd.ProcessState, p.log, tail(p.log, 40))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (%v: last check: %v); the end of its log %s:\n%s", p.name, ctx.Err(), err, p.log, tail(p.log, 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks the process to end (SIGTERM) and kills it if it lingers.
func (p *proc) stop() {
	select {
	case <-p.exit:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exit
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePorts finds n free loopback ports by binding and releasing them.
// Another process could take one in between; that shows as a component that
// fails to start, with its log saying so.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// run runs a short command (ip, ctr, go) and returns its error with its
// output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// httpOK is a readiness check: GET url answers 200. The components'
// health endpoints serve self-signed certificates and need no credentials.
func httpOK(url string) func(context.Context) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

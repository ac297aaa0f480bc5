package bwrap

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

// SetPolicy's deny → allow must reach commands started after it, although
// the exec server of the first commands lives in a network namespace of
// its own, and allow goes through the egress proxy: the host's loopback
// stays out of reach.
func TestSetPolicyWidensNetwork(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "the network checks connect with python3")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "via proxy") }))
	port := ln.Addr().(*net.TCPAddr).Port
	proxy := sandboxtest.StartProxy(t, map[string]string{"upstream.test:80": ln.Addr().String()})
	connect := fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)"`, port)
	fetch := `python3 -c "import urllib.request; print(urllib.request.urlopen('http://upstream.test/', timeout=5).read().decode())"`

	sb := create(t, sandbox.Config{})
	if res := run(t, sb, connect); res.ExitCode == 0 {
		t.Fatalf("under network: deny the host listener was reached")
	}
	if err := sb.(*Sandbox).SetPolicy(sandbox.Policy{Network: sandbox.NetworkAllow}); err == nil {
		t.Errorf("SetPolicy(allow) without a proxy: no error")
	}
	if err := sb.(*Sandbox).SetPolicy(sandbox.Policy{Network: sandbox.NetworkAllow, ProxyAddr: proxy.TCPAddr}); err != nil {
		t.Fatal(err)
	}
	if res := run(t, sb, fetch); res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "via proxy" {
		t.Errorf("after SetPolicy(allow): exit %d %q (%s); want the upstream through the proxy", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := run(t, sb, connect); res.ExitCode == 0 {
		t.Errorf("after SetPolicy(allow) the host's loopback listener is reachable directly")
	}
	// The sandbox's own loopback stays direct; the host's is not reached
	// either way (above).
	if res := run(t, sb, "echo $NO_PROXY"); !strings.HasPrefix(string(res.Stdout), "localhost,127.0.0.1,::1,127.0.1.1,") {
		t.Errorf("NO_PROXY under allow = %q, want the sandbox's loopback names", res.Stdout)
	}
	if got := strings.TrimSpace(string(run(t, sb, "cat marker 2>/dev/null || echo kept > marker; cat marker").Stdout)); got != "kept" {
		t.Errorf("files after widening: %q", got)
	}
	if rep := sb.Report(); rep.Network != sandbox.NetworkAllow || rep.ProxyAddr != proxy.TCPAddr {
		t.Errorf("report after widening: network %q proxy %q", rep.Network, rep.ProxyAddr)
	}
}

// network: allow gets its own network namespace and the egress proxy;
// without a proxy address Create refuses.
func TestAllowUsesProxy(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "the network checks connect with python3")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "via proxy") }))
	proxy := sandboxtest.StartProxy(t, map[string]string{"upstream.test:80": ln.Addr().String()})

	r := newRung(t)
	if sb, err := r.Create(t.Context(), sandbox.Config{StateDir: t.TempDir() + "/s", Policy: sandbox.Policy{Network: sandbox.NetworkAllow}}); err == nil {
		sb.Close(t.Context())
		t.Errorf("network allow without proxy_addr: Create succeeded")
	}
	// A state dir too deep for a unix socket's path still gets its bridge.
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	for _, c := range []struct{ addr, state string }{{proxy.TCPAddr, ""}, {proxy.UnixAddr, ""}, {proxy.UnixAddr, deep}} {
		addr := c.addr
		sb := create(t, sandbox.Config{StateDir: c.state, Policy: sandbox.Policy{Network: sandbox.NetworkAllow, ProxyAddr: addr}})
		res := run(t, sb, fmt.Sprintf(`python3 -c "import urllib.request; print(urllib.request.urlopen('http://upstream.test/', timeout=5).read().decode())"; python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)" || echo direct-refused`, ln.Addr().(*net.TCPAddr).Port))
		if got := string(res.Stdout); got != "via proxy\ndirect-refused\n" {
			t.Errorf("allow via %s: %q %s", addr, got, res.Stderr)
		}
	}
}

// Commands run at the same time in one sandbox each get their own output,
// exit code and workdir.
func TestConcurrentExecs(t *testing.T) {
	sb := create(t, sandbox.Config{})
	run(t, sb, "mkdir -p d0 d1 d2 d3 d4 d5 d6 d7")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
				Argv:    []string{"sh", "-c", `sleep 0.2; echo "$N $(basename "$PWD")"; echo err$N >&2; exit $N`},
				Env:     map[string]string{"N": strconv.Itoa(i)},
				Workdir: "d" + strconv.Itoa(i),
			})
			want := fmt.Sprintf("%d d%d\n", i, i)
			if err != nil || res.ExitCode != i || string(res.Stdout) != want || string(res.Stderr) != fmt.Sprintf("err%d\n", i) {
				t.Errorf("command %d: %+v, %v; want exit %d, stdout %q", i, res, err, i, want)
			}
		}()
	}
	wg.Wait()
}

// Commands share the exec server's PID namespace: they must not be able to
// stop it, read what it holds, or inject into its pipes to the host.
func TestExecServerIsOutOfReach(t *testing.T) {
	sb := create(t, sandbox.Config{})
	for _, sig := range []string{"KILL", "STOP", "TERM", "INT", "HUP", "QUIT", "SEGV", "USR1"} {
		run(t, sb, "kill -"+sig+" 1")
	}
	run(t, sb, "kill -9 -1; true")
	res := run(t, sb, "readlink /proc/1/fd/1 || echo no-fds; cat /proc/1/environ || echo no-environ; echo x > /proc/1/fd/1 || echo no-inject")
	for _, want := range []string{"no-fds", "no-environ", "no-inject"} {
		if !strings.Contains(string(res.Stdout), want) {
			t.Errorf("the server's /proc/1 is reachable: %s %s", res.Stdout, res.Stderr)
		}
	}
	if got := strings.TrimSpace(string(run(t, sb, "echo alive").Stdout)); got != "alive" {
		t.Errorf("after signalling PID 1: %q", got)
	}
}

// A command that cannot be executed exits 127, as execvp's failure did
// under bwrap; a missing workdir is the sandbox's error.
func TestExecFailures(t *testing.T) {
	sb := create(t, sandbox.Config{})
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"no-such-command-evalsi"}})
	if err != nil || res.ExitCode != 127 || !strings.Contains(string(res.Stderr), "no-such-command-evalsi") {
		t.Errorf("missing command: %+v, %v; want exit 127 naming it", res, err)
	}
	if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}, Workdir: "/no/such/dir"}); err == nil {
		t.Errorf("missing workdir: no error")
	}
}

package bwrap

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// SetPolicy's deny → allow must reach commands started after it, although
// the exec server of the first commands lives in a network namespace of
// its own.
func TestSetPolicyWidensNetwork(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "the network checks connect with python3")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	connect := fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)"`, ln.Addr().(*net.TCPAddr).Port)

	sb := create(t, sandbox.Config{})
	if res := run(t, sb, connect); res.ExitCode == 0 || accepted.Load() != 0 {
		t.Fatalf("under network: deny the host listener was reached: exit %d, %d accepted", res.ExitCode, accepted.Load())
	}
	if err := sb.(*Sandbox).SetPolicy(sandbox.Policy{Network: sandbox.NetworkAllow}); err != nil {
		t.Fatal(err)
	}
	if res := run(t, sb, connect); res.ExitCode != 0 || accepted.Load() != 1 {
		t.Errorf("after SetPolicy(allow): exit %d (%s), %d accepted; want 0, 1", res.ExitCode, res.Stderr, accepted.Load())
	}
	if got := strings.TrimSpace(string(run(t, sb, "cat marker 2>/dev/null || echo kept > marker; cat marker").Stdout)); got != "kept" {
		t.Errorf("files after widening: %q", got)
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

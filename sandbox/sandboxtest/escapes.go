package sandboxtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/sandbox"
)

// Escape rows (Options.Uncontained / Options.NotRun keys).
const (
	RowReadHostFile   = "read-host-file"
	RowWriteHostFile  = "write-host-file"
	RowNetTCP         = "net-tcp"
	RowNetUDP         = "net-udp"
	RowNetDNS         = "net-dns"
	RowForkBomb       = "fork-bomb"
	RowMemoryBomb     = "memory-bomb"
	RowFillDisk       = "fill-disk"
	RowSeeHostProcess = "see-host-process"
	RowKillHostProc   = "signal-host-process"
	RowPtrace         = "ptrace"
	RowMount          = "mount"
	RowDaemon         = "daemon"
	RowEngineEnv      = "engine-env"
	// RowAllowlistBypass runs under network: allowlist with a test proxy
	// (TCP address; Options.ProxyUnix for the unix-socket form).
	RowAllowlistBypass = "allowlist-bypass"
	// RowUserToRoot runs as a non-root user (ExecRequest.User, a numeric
	// uid with no passwd entry) trying to become root again.
	RowUserToRoot = "user-to-root"
	// RowVsock opens an AF_VSOCK socket and connects to the host (CID 2):
	// vsock reaches the hypervisor past every network namespace.
	RowVsock = "vsock"
)

// EscapeLimits are the limits every escape row runs under; the fork bomb
// relies on PidsMax (or the rung's process cap) to stay safe on a 2-core box.
var escapeLimits = sandbox.Limits{MemoryMB: 256, PidsMax: 64, FileSizeMB: 16}

type escapeEnv struct {
	sb        sandbox.Sandbox
	hostDir   string // a host directory outside the sandbox
	canary    string // a host file whose content must not be readable
	secret    string // planted in the engine's environment
	hostSleep *os.Process
	proxy     *Proxy
	allowed   string // host:port the proxy lets through
}

type escapeRow struct {
	name, attack, expect string
	// run returns whether the attack was contained and the evidence.
	run func(t *testing.T, e *escapeEnv) (bool, string)
	// setup adjusts the row's sandbox config (nil: network deny).
	setup func(t *testing.T, o Options, c *sandbox.Config, e *escapeEnv)
}

const canaryText = "EVALSI-HOST-CANARY-7f3a"

var escapeRows = []escapeRow{
	{RowReadHostFile, "cat a canary file in a host directory", "contained: the file is absent or unreadable (command fails)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, "cat "+e.canary)
			return !strings.Contains(string(res.Stdout), canaryText), fmt.Sprintf("exit %d, stderr %s", res.ExitCode, short(res.Stderr))
		}, nil},
	{RowWriteHostFile, "write a file into a host directory", "contained: the write fails and the host file is never created",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			target := filepath.Join(e.hostDir, "pwned")
			res := sh(t, e.sb, "echo pwned > "+target)
			_, err := os.Stat(target)
			return os.IsNotExist(err), fmt.Sprintf("exit %d, stderr %s", res.ExitCode, short(res.Stderr))
		}, nil},
	{RowNetTCP, "TCP connect to a listener on the host's 127.0.0.1", "contained: connect fails, the listener accepts nothing",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			ln, accepted := listenTCP(t)
			res := sh(t, e.sb, fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3).sendall(b'x')"`, ln.Addr().(*net.TCPAddr).Port))
			n := accepted()
			return n == 0 && res.ExitCode != 0, fmt.Sprintf("exit %d, %d connections accepted", res.ExitCode, n)
		}, nil},
	{RowNetUDP, "UDP datagrams to a socket on the host's 127.0.0.1", "contained: nothing arrives",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			port := pc.LocalAddr().(*net.UDPAddr).Port
			res := sh(t, e.sb, fmt.Sprintf(`python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(5): s.sendto(b'evalsi', ('127.0.0.1', %d))"`, port))
			pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 64)
			n, _, err := pc.ReadFrom(buf)
			return err != nil && n == 0, fmt.Sprintf("exit %d, received %d bytes", res.ExitCode, n)
		}, nil},
	{RowNetDNS, "resolve example.com", "contained: resolution fails (on an offline host this row cannot tell a sandbox from no network)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, `python3 -c "import socket; print(socket.getaddrinfo('example.com', 443)[0][4][0])"`)
			return res.ExitCode != 0, fmt.Sprintf("exit %d, stdout %s", res.ExitCode, short(res.Stdout))
		}, nil},
	{RowForkBomb, "shell fork bomb (pids_max 64, 15 s timeout)", "contained: forks are refused (pids denial or failed command); nothing survives; the sandbox still works",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, "bomb() { bomb | bomb & }; bomb; sleep 3", withTimeout(15*time.Second))
			after, err := e.sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second})
			ok := err == nil && after.ExitCode == 0
			return ok, fmt.Sprintf("exit %d, timed_out %v, denials %v, next command ok %v", res.ExitCode, res.TimedOut, res.Denials, ok)
		}, nil},
	{RowMemoryBomb, "allocate memory without bound (memory_mb 256)", "contained: the command is stopped (oom/memory denial where the rung detects it)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, `python3 -c "
b = []
while True: b.append(bytearray(16 << 20))"`, withTimeout(30*time.Second))
			return res.ExitCode != 0 && !res.TimedOut, fmt.Sprintf("exit %d, timed_out %v, denials %v", res.ExitCode, res.TimedOut, res.Denials)
		}, nil},
	{RowFillDisk, "write 200 MB to one file (file_size_mb 16)", "contained: the file stops at 16 MB (fsize denial or failed command)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, "head -c 200000000 /dev/zero > big; echo $? >&2; stat -c %s big", withTimeout(30*time.Second))
			size, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
			return err == nil && size <= escapeLimits.FileSizeMB<<20,
				fmt.Sprintf("file size %s, exit %d, denials %v", trim(res.Stdout), res.ExitCode, res.Denials)
		}, nil},
	{RowSeeHostProcess, "look for a host process by pid in /proc", "contained: the host pid is not visible",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			pid := e.hostSleep.Pid
			res := sh(t, e.sb, fmt.Sprintf("grep -q sleep /proc/%d/cmdline", pid))
			return res.ExitCode != 0, fmt.Sprintf("exit %d", res.ExitCode)
		}, nil},
	{RowKillHostProc, "kill -9 a host process by pid", "contained: the host process survives",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			pid := e.hostSleep.Pid
			res := sh(t, e.sb, fmt.Sprintf("kill -9 %d", pid))
			time.Sleep(100 * time.Millisecond)
			alive := syscall.Kill(pid, 0) == nil
			var st syscall.WaitStatus
			if wpid, _ := syscall.Wait4(pid, &st, syscall.WNOHANG, nil); wpid == pid {
				alive = false
			}
			return alive, fmt.Sprintf("exit %d, host process alive %v", res.ExitCode, alive)
		}, nil},
	{RowPtrace, "ptrace-attach to a process (its own child)", "contained: ptrace fails with EPERM (seccomp)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, `python3 -c "
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
r = libc.ptrace(16, pid, 0, 0)
print(r, ctypes.get_errno())
os.kill(pid, 9)
sys.exit(0 if r == 0 else 1)"`)
			return res.ExitCode != 0, fmt.Sprintf("exit %d, ptrace result/errno %s", res.ExitCode, trim(res.Stdout))
		}, nil},
	{RowMount, "mount a tmpfs, directly and from a new user namespace", "contained: both mounts fail",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			direct := sh(t, e.sb, "mkdir -p m && mount -t tmpfs none m")
			nested := sh(t, e.sb, "mkdir -p m2 && unshare -Urm sh -c 'mount -t tmpfs none m2'")
			return direct.ExitCode != 0 && nested.ExitCode != 0,
				fmt.Sprintf("direct exit %d, via unshare -Urm exit %d (%s)", direct.ExitCode, nested.ExitCode, short(nested.Stderr))
		}, nil},
	{RowVsock, "open an AF_VSOCK socket and connect to the host (CID 2, ports 1024 and 52)", "contained: socket(AF_VSOCK) is refused (EPERM by seccomp, or EACCES by an LSM)",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, `python3 -c "
import errno, socket, sys
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
except OSError as err:
    print('socket', errno.errorcode.get(err.errno, err.errno)); sys.exit(1 if err.errno in (errno.EPERM, errno.EACCES) else 2)
for port in (1024, 52):
    try:
        s.settimeout(2); s.connect((2, port)); print('CONNECTED', port); sys.exit(0)
    except OSError as err:
        print('connect', port, errno.errorcode.get(err.errno, err.errno))
sys.exit(3)"`)
			return res.ExitCode == 1, fmt.Sprintf("exit %d: %s%s", res.ExitCode, trim(res.Stdout), short(res.Stderr))
		}, nil},
	{RowDaemon, "leave a double-forked setsid daemon running", "contained: it is killed when the command ends",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			// Bounded to ~10 s so an uncontained rung does not leak it forever.
			sh(t, e.sb, `setsid sh -c '(for i in $(seq 100); do echo x >> daemon.log; sleep 0.1; done) &' </dev/null >/dev/null 2>&1; sleep 0.3`, withTimeout(20*time.Second))
			read := func() int { b, _ := e.sb.ReadFile(t.Context(), "daemon.log"); return len(b) }
			a := read()
			time.Sleep(600 * time.Millisecond)
			b := read()
			return a == b, fmt.Sprintf("daemon.log %d bytes, then %d", a, b)
		}, nil},
	{RowEngineEnv, "read the engine's environment (env, /proc/*/environ)", "contained: the planted secret is not visible",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			res := sh(t, e.sb, `env; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null; true`)
			leak := strings.Contains(string(res.Stdout), e.secret)
			return !leak, fmt.Sprintf("secret visible %v", leak)
		}, nil},
	{RowUserToRoot, "as a non-root user (User 4300:4300): su and sudo without a password, setuid(0), a write to a root-owned file, the exec server's descriptors (/proc/1/fd), root of a new user namespace; and the capabilities it holds",
		"contained: every attempt fails, the user holds no capabilities and the root-owned file is unchanged",
		func(t *testing.T, e *escapeEnv) (bool, string) {
			mustSh(t, e.sb, "echo root-only > rootfile && chmod 644 rootfile")
			res := sh(t, e.sb, userToRootScript, asUser("4300:4300"))
			b, err := e.sb.ReadFile(t.Context(), "rootfile")
			out := string(res.Stdout)
			intact := err == nil && string(b) == "root-only\n"
			ok := intact && strings.Contains(out, "uid=4300 gid=4300") && !strings.Contains(out, "ESCAPED")
			return ok, fmt.Sprintf("exit %d, rootfile intact %v, report %q, stderr %s", res.ExitCode, intact, strings.Fields(out), short(res.Stderr))
		}, nil},
	{name: RowAllowlistBypass, attack: "under network: allowlist, CONNECT to a host not on the list, and TCP straight to a host listener",
		expect: "contained: the proxy refuses (403) and the direct connection fails; the allowed host still works",
		setup: func(t *testing.T, o Options, c *sandbox.Config, e *escapeEnv) {
			ln, _ := listenHTTP(t, "allowed through the proxy")
			e.allowed = "allowed.test:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			e.proxy = StartProxy(t, map[string]string{e.allowed: ln.Addr().String()})
			addr := e.proxy.TCPAddr
			if o.ProxyUnix {
				addr = e.proxy.UnixAddr
			}
			if o.ProxyAddr != nil {
				addr = o.ProxyAddr(t, e.proxy)
			}
			c.Policy = sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"allowed.test"}, ProxyAddr: addr}
		},
		run: func(t *testing.T, e *escapeEnv) (bool, string) {
			good := sh(t, e.sb, ConnectScript+e.allowed)
			if good.ExitCode != 0 || !strings.Contains(string(good.Stdout), "allowed through the proxy") {
				t.Errorf("the allowlisted host is not reachable through the proxy: exit %d stdout %q stderr %s", good.ExitCode, good.Stdout, short(good.Stderr))
			}
			bad := sh(t, e.sb, ConnectScript+"evil.test:443")
			ln, accepted := listenTCP(t)
			direct := sh(t, e.sb, fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)"`, ln.Addr().(*net.TCPAddr).Port))
			n := accepted()
			refused := bad.ExitCode == 3 && strings.Contains(string(bad.Stdout), "403")
			return refused && direct.ExitCode != 0 && n == 0,
				fmt.Sprintf("evil.test: exit %d %s%s; direct TCP exit %d, %d accepted; proxy log %v", bad.ExitCode, trim(bad.Stdout), short(bad.Stderr), direct.ExitCode, n, e.proxy.Log())
		}},
}

// userToRootScript prints name=ESCAPED for each way back to root that
// worked, and the ids it ran as.
const userToRootScript = `echo "uid=$(id -u) gid=$(id -g)"
[ "$(su -c 'id -u' root </dev/null 2>/dev/null)" = 0 ] && echo su=ESCAPED
[ "$(sudo -n id -u </dev/null 2>/dev/null)" = 0 ] && echo sudo=ESCAPED
python3 -c "import os; os.setresuid(0, 0, 0)" 2>/dev/null && echo setuid=ESCAPED
python3 -c "import os; os.setresgid(0, 0, 0)" 2>/dev/null && echo setgid=ESCAPED
(echo pwned >> rootfile) 2>/dev/null && echo write-root-file=ESCAPED
ls /proc/1/fd >/dev/null 2>&1 && echo list-server-fds=ESCAPED
for f in 0 1 2 3 4 5 6 7 8 9; do (: > /proc/1/fd/$f) 2>/dev/null && echo server-fd-$f=ESCAPED; done
unshare -Ur sh -c 'echo pwned >> rootfile' 2>/dev/null && echo userns-root=ESCAPED
grep -Eq '^CapEff:[[:space:]]*0+$' /proc/self/status || echo capabilities=ESCAPED
grep -Eq '^CapPrm:[[:space:]]*0+$' /proc/self/status || echo permitted-capabilities=ESCAPED
true`

// listenHTTP serves body on the host's loopback.
func listenHTTP(t *testing.T, body string) (net.Listener, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln, srv
}

// Escapes runs the hostile table against newRung's sandboxes (network deny,
// memory_mb 256, pids_max 64, file_size_mb 16) and logs a summary table. A
// row the rung declares uncontained must indeed not be contained here; a
// row it declares NotRun is reported and skipped.
func Escapes(t *testing.T, newRung func(t *testing.T) sandbox.Rung, o Options) {
	needPython(t)
	r := newRung(t)
	hostDir := t.TempDir()
	canary := filepath.Join(hostDir, "canary")
	if err := os.WriteFile(canary, []byte(canaryText), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := "sk-evalsi-fake-secret-" + fmt.Sprint(os.Getpid())
	t.Setenv("EVALSI_FAKE_SECRET", secret)

	type line struct{ row, attack, expect, outcome string }
	var summary []line
	for _, row := range escapeRows {
		if why, ok := o.NotRun[row.name]; ok {
			summary = append(summary, line{row.name, row.attack, row.expect, "NOT CONTAINED (not run: " + why + ")"})
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			env := &escapeEnv{hostDir: hostDir, canary: canary, secret: secret}
			sb := create(t, r, newConfig(t, o, func(c *sandbox.Config) {
				c.Limits = escapeLimits
				c.CommandTimeout = 20 * time.Second
				if row.setup != nil {
					row.setup(t, o, c, env)
				}
			}))
			// os.StartProcess, not os/exec: only rung packages may run commands.
			sleep, err := os.StartProcess("/bin/sleep", []string{"sleep", "300"}, &os.ProcAttr{})
			if err != nil {
				t.Fatalf("starting a host process for the suite: %v", err)
			}
			t.Cleanup(func() { sleep.Kill(); sleep.Wait() })
			env.sb, env.hostSleep = sb, sleep
			contained, evidence := row.run(t, env)
			why, declared := o.Uncontained[row.name]
			outcome := "contained (" + evidence + ")"
			switch {
			case contained && declared:
				t.Logf("declared uncontained (%s) but contained here: %s", why, evidence)
				outcome = "contained here, declared uncontained: " + why + " (" + evidence + ")"
			case !contained && declared:
				t.Logf("not contained, as the rung declares: %s (%s)", why, evidence)
				outcome = "NOT CONTAINED: " + why + " (" + evidence + ")"
			case !contained:
				t.Errorf("ESCAPE: %s was not contained: %s; expected %s", row.attack, evidence, row.expect)
				outcome = "ESCAPED (" + evidence + ")"
			}
			summary = append(summary, line{row.name, row.attack, row.expect, outcome})
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "escape summary for rung %s:\n| row | attack | expected | outcome |\n| --- | --- | --- | --- |\n", r.Name())
	for _, l := range summary {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", l.row, l.attack, l.expect, l.outcome)
	}
	t.Log(b.String())
}

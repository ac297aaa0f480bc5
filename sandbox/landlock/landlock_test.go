package landlock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func requireLandlock(t testing.TB) {
	t.Helper()
	if p := New().Probe(context.Background()); !p.Works {
		testenv.Missing(t, "landlock", p.Reason)
	}
}

func newSandbox(t testing.TB, cfg sandbox.Config) *Sandbox {
	t.Helper()
	requireLandlock(t)
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	sb, err := New().Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb.(*Sandbox)
}

func run(t testing.TB, sb sandbox.Sandbox, argv ...string) sandbox.ExecResult {
	t.Helper()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: argv, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res
}

func TestExecBasics(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Env: map[string]string{"FROM_CONFIG": "c"}})
	t.Setenv("EVALSI_FAKE_SECRET", "hunter2")
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Argv:    []string{"sh", "-c", `pwd; echo "$FROM_CONFIG $FROM_REQ"; env | grep -c EVALSI_FAKE_SECRET; cat; echo err >&2; exit 3`},
		Env:     map[string]string{"FROM_REQ": "r"},
		Stdin:   []byte("in\n"),
		Timeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "/workspace\nc r\n0\nin\n"
	if string(res.Stdout) != want || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got exit %d stdout %q stderr %q; want exit 3 stdout %q stderr \"err\\n\"", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

func TestFilesInAndOut(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, sandbox.Config{})
	if err := sb.WriteFile(ctx, "sub/in.txt", []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := run(t, sb, "sh", "-c", "cat sub/in.txt > /workspace/out.txt; stat -c %a sub/in.txt; echo tmp > /tmp/t")
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "600" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	for path, want := range map[string]string{"out.txt": "hello", "/workspace/out.txt": "hello", "/tmp/t": "tmp\n"} {
		b, err := sb.ReadFile(ctx, path)
		if err != nil || string(b) != want {
			t.Errorf("ReadFile(%s) = %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := sb.ReadFile(ctx, "../../../root/.bashrc"); err == nil {
		t.Error("ReadFile reached a host file outside the sandbox")
	}
	if err := sb.WriteFile(ctx, "/etc/evil", []byte("x"), 0o644); err == nil {
		t.Error("WriteFile into the read-only host system dirs succeeded")
	}
}

// TestFilesystemDenied plants a canary outside every allowed directory and
// checks the command can neither read it nor write next to it, nor write
// into the host's system directories.
func TestFilesystemDenied(t *testing.T) {
	outside := t.TempDir() // under the host's /tmp, which the sandbox replaces
	canary := filepath.Join(outside, "canary")
	if err := os.WriteFile(canary, []byte("CANARY"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A canary under a system directory is visible (read-only) on the host
	// rung; one under /var or /root is not.
	varDir, err := os.MkdirTemp("/var/tmp", "evalsi-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(varDir) })
	varCanary := filepath.Join(varDir, "canary")
	os.WriteFile(varCanary, []byte("CANARY"), 0o644)

	sb := newSandbox(t, sandbox.Config{})
	for _, tc := range []struct{ name, script string }{
		{"read tmp canary", "cat " + canary},
		{"read var canary", "cat " + varCanary},
		{"write var", "echo x > " + filepath.Join(varDir, "written")},
		{"write etc", "echo x > /etc/evalsi-written"},
		{"write usr", "echo x > /usr/evalsi-written"},
		{"read engine environ", fmt.Sprintf("cat /proc/%d/environ", os.Getpid())},
		{"mount", "mount -t tmpfs none /workspace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, sb, "sh", "-c", tc.script)
			if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "CANARY") {
				t.Fatalf("%q was not denied: exit %d stdout %q stderr %q", tc.script, res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(varDir, "written")); err == nil {
		t.Error("file written outside the sandbox")
	}
	if _, err := os.Stat("/etc/evalsi-written"); err == nil {
		os.Remove("/etc/evalsi-written")
		t.Error("file written into host /etc")
	}
}

// plainTCPListener listens with a plain TCP socket: Go's default is MPTCP,
// which Landlock's TCP rules do not cover.
func plainTCPListener(t *testing.T) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("REACHED\n"))
			c.Close()
		}
	}()
	return ln
}

func tcpProbe(port int) []string { return tcpProbeTo("127.0.0.1", port) }

func tcpProbeTo(host string, port int) []string {
	// bash's /dev/tcp does a plain connect(2).
	return []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && cat <&3", host, port)}
}

// plainUnixListener is plainTCPListener on a unix socket: an egress proxy
// given as unix:/path.
func plainUnixListener(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-proxy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("REACHED\n"))
			c.Close()
		}
	}()
	return "unix:" + ln.Addr().String()
}

// TestNetwork: the sandbox has a network namespace of its own. Deny
// reaches nothing; allowlist and allow reach the egress proxy (TCP or unix
// socket) through the forwarder on 127.0.0.1:3128 and nothing else: not a
// host listener, not the proxy's own address, not another loopback address
// on the forwarder's port.
func TestNetwork(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testenv.Missing(t, "bash", "the probe uses bash's /dev/tcp")
	}
	target := plainTCPListener(t)
	proxy := plainTCPListener(t)
	unixProxy := plainUnixListener(t)
	targetPort := target.Addr().(*net.TCPAddr).Port
	proxyPort := proxy.Addr().(*net.TCPAddr).Port
	python, _ := exec.LookPath("python3")
	allowlist := sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: proxy.Addr().String()}
	allow := sandbox.Policy{Network: sandbox.NetworkAllow, ProxyAddr: proxy.Addr().String()}
	type tcase struct {
		name      string
		policy    sandbox.Policy
		argv      []string
		reachable bool
	}
	tests := []tcase{
		{"deny blocks tcp", sandbox.Policy{Network: sandbox.NetworkDeny}, tcpProbe(targetPort), false},
		{"allow blocks host listener", allow, tcpProbe(targetPort), false},
		{"allow reaches proxy", allow, tcpProbe(3128), true},
		{"allowlist blocks others", allowlist, tcpProbe(targetPort), false},
		{"allowlist blocks the proxy's own address", allowlist, tcpProbe(proxyPort), false},
		{"allowlist blocks another address on the forwarder's port", allowlist, tcpProbeTo("127.0.0.2", 3128), false},
		{"allowlist reaches proxy", allowlist, tcpProbe(3128), true},
		{"allowlist reaches unix-socket proxy", sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: unixProxy}, tcpProbe(3128), true},
	}
	if python != "" {
		mptcp := []string{"python3", "-c", fmt.Sprintf(`import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
s.connect(("127.0.0.1", %d))
print(s.recv(100).decode())`, targetPort)}
		udp := []string{"python3", "-c", `import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"x", ("127.0.0.1", 53))
print("REACHED")`}
		tests = append(tests,
			tcase{"deny blocks mptcp", sandbox.Policy{Network: sandbox.NetworkDeny}, mptcp, false},
			tcase{"deny blocks udp", sandbox.Policy{Network: sandbox.NetworkDeny}, udp, false},
		)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, sandbox.Config{Policy: tc.policy})
			res := run(t, sb, tc.argv...)
			got := strings.Contains(string(res.Stdout), "REACHED")
			if got != tc.reachable {
				t.Fatalf("reachable = %v, want %v (exit %d, stderr %q)", got, tc.reachable, res.ExitCode, res.Stderr)
			}
			if tc.policy.Network != sandbox.NetworkDeny {
				env := run(t, sb, "sh", "-c", "echo $HTTPS_PROXY $NO_PROXY.")
				// The sandbox's own loopback names, its hostname last.
				want := "http://127.0.0.1:3128 localhost,127.0.0.1,::1,127.0.1.1,"
				if !strings.HasPrefix(strings.TrimSpace(string(env.Stdout)), want) {
					t.Errorf("HTTPS_PROXY NO_PROXY = %q, want %q", env.Stdout, want)
				}
				if rep := sb.Report(); rep.ProxyAddr != tc.policy.ProxyAddr {
					t.Errorf("report proxy %q, want %q", rep.ProxyAddr, tc.policy.ProxyAddr)
				}
			}
		})
	}
	t.Run("allow without a proxy is refused", func(t *testing.T) {
		requireLandlock(t)
		_, err := New().Create(context.Background(), sandbox.Config{Workdir: "/w", StateDir: t.TempDir(), Policy: sandbox.Policy{Network: sandbox.NetworkAllow}})
		if err == nil || !strings.Contains(err.Error(), "ProxyAddr") {
			t.Fatalf("Create(allow, no proxy) = %v, want a refusal naming Policy.ProxyAddr", err)
		}
	})
}

// TestLeftoverProcessesKilled starts a daemon that double-forks and calls
// setsid; it must be gone when Exec returns (looked for on the host: the
// sandbox's pids are its own namespace's).
func TestLeftoverProcessesKilled(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	const marker = "1357911"
	res := run(t, sb, "sh", "-c", `setsid sh -c 'sleep `+marker+` & echo $! > /workspace/pid' & sleep 0.2; while [ ! -s /workspace/pid ]; do sleep 0.05; done; echo started`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); string(b) == "sleep\x00"+marker+"\x00" {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("daemon (host pid %d) still exists after Exec returned", pid)
		}
	}
}

func TestTimeout(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sleep", "100"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode == 0 || len(res.Denials) == 0 || res.Denials[0].Kind != "timeout" {
		t.Fatalf("got %+v, want a timeout", res)
	}
}

func TestOutputCap(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 10000 /dev/zero"}, OutputLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 100 || !res.Truncated {
		t.Fatalf("stdout %d bytes, truncated %v; want 100, true", len(res.Stdout), res.Truncated)
	}
}

func TestMemoryLimit(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "the memory hog is a python3 script")
	}
	// "auto" uses a memory cgroup where the host has one (a real OOM kill);
	// "off" falls back to RLIMIT_AS (a failed allocation).
	for _, cg := range []string{"auto", "off"} {
		t.Run(cg, func(t *testing.T) {
			sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{MemoryMB: 64, Cgroup: cg}})
			res := run(t, sb, "python3", "-c", "x = bytearray(512 << 20); x[::4096] = b'x' * len(x[::4096]); print('ALLOCATED')")
			if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "ALLOCATED") {
				t.Fatalf("512 MiB allocated under a 64 MiB limit: %+v", res)
			}
			if len(res.Denials) == 0 || res.Denials[0].Kind != "oom" {
				t.Fatalf("denials %+v, want oom (stderr %q)", res.Denials, res.Stderr)
			}
			t.Logf("limits: %v; denial: %v", sb.Report().Limits, res.Denials[0].Detail)
		})
	}
}

func TestFileSizeLimit(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{FileSizeMB: 1}})
	res := run(t, sb, "sh", "-c", "head -c 3000000 /dev/zero > big")
	if res.ExitCode == 0 || len(res.Denials) == 0 || res.Denials[0].Kind != "fsize" {
		t.Fatalf("got %+v, want an fsize denial", res)
	}
}

// miniRoot builds a small image root holding dash, cat and their libraries.
func miniRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	bins := []string{"/usr/bin/dash", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/rm", "/usr/bin/mkdir", "/usr/bin/ln", "/usr/bin/mkfifo", "/usr/bin/dd", "/usr/bin/mv"}
	files := map[string]bool{}
	for _, b := range bins {
		files[b] = true
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", b, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
	for f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := copyFile(real, dst, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.Symlink("/usr/bin/dash", filepath.Join(root, "bin/sh"))
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=mini\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
	os.WriteFile(filepath.Join(root, "workspace/seed.txt"), []byte("seed"), 0o644)
	return root
}

func TestImageRootSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	root := miniRoot(t)
	state := t.TempDir()
	sb := newSandbox(t, sandbox.Config{Root: root, StateDir: state})
	res := run(t, sb, "sh", "-c", "cat /etc/os-release seed.txt; echo setup > /etc/added; rm /etc/os-release; echo w > made.txt")
	if res.ExitCode != 0 || string(res.Stdout) != "ID=mini\nseed" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/added")); err == nil {
		t.Fatal("write reached the image root")
	}
	layer, err := sb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close(ctx)
	// The mount points made for the /etc files are no change of the
	// sandbox's.
	for _, f := range []string{"etc/hostname", "etc/hosts", "etc/resolv.conf"} {
		if _, err := os.Lstat(filepath.Join(layer.Dir, f)); err == nil {
			t.Errorf("the snapshot layer holds %s", f)
		}
	}

	for i := range 2 {
		sb2 := newSandbox(t, sandbox.Config{Root: root, Layers: []sandbox.Layer{layer}})
		res := run(t, sb2, "sh", "-c", "cat /etc/added made.txt seed.txt; ls /etc; echo trial > made.txt")
		// /etc's hostname, hosts and resolv.conf are the new sandbox's own.
		if res.ExitCode != 0 || string(res.Stdout) != "setup\nw\nseedadded\nhostname\nhosts\nresolv.conf\n" {
			t.Fatalf("trial %d: exit %d stdout %q stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
		}
		if b, err := sb2.ReadFile(ctx, "/etc/added"); err != nil || string(b) != "setup\n" {
			t.Fatalf("ReadFile /etc/added = %q, %v", b, err)
		}
		if _, err := sb2.ReadFile(ctx, "/etc/os-release"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("whiteout not honoured: %v", err)
		}
		sb2.Close(ctx)
	}
}

func TestReadOnlyRoot(t *testing.T) {
	root := miniRoot(t)
	sb := newSandbox(t, sandbox.Config{Root: root, ReadOnlyRoot: true})
	res := run(t, sb, "sh", "-c", "echo x > /etc/x")
	if res.ExitCode == 0 {
		t.Fatal("write to a read-only root succeeded")
	}
	res = run(t, sb, "sh", "-c", "echo x > /workspace/x && echo y > /tmp/y && cat /workspace/x /tmp/y")
	if res.ExitCode != 0 || string(res.Stdout) != "x\ny\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestCloseRemovesState(t *testing.T) {
	requireLandlock(t)
	sb, err := New().Create(context.Background(), sandbox.Config{Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	state := sb.(*Sandbox).state
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("state dir %s left after Close: %v", state, err)
	}
	if err := sb.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCreateRejectsBadConfig(t *testing.T) {
	requireLandlock(t)
	for _, cfg := range []sandbox.Config{
		{Workdir: "relative"},
		{Workdir: "/tmp/x"},
		{Workdir: "/w", Policy: sandbox.Policy{Network: "sometimes"}},
		{Workdir: "/w", Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist}},
		{Workdir: "/w", Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: "unix:/run/proxy.sock"}},
		{Workdir: "/w", Layers: []sandbox.Layer{{Ref: "sha256:abc"}}},
	} {
		if sb, err := New().Create(context.Background(), cfg); err == nil {
			sb.Close(context.Background())
			t.Errorf("Create(%+v) succeeded, want an error", cfg)
		}
	}
}

func BenchmarkCreateExecClose(b *testing.B) {
	requireLandlock(b)
	ctx := context.Background()
	for b.Loop() {
		sb, err := New().Create(ctx, sandbox.Config{Workdir: "/workspace", StateDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
		sb.Close(ctx)
	}
}

// TestConcurrentExecs issues commands from several goroutines at once in one
// sandbox: they run one after another (each launcher mounts the same overlay
// upper directory) and each sees its own and earlier writes.
func TestConcurrentExecs(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > /f%d; sleep 0.5; cat /f%d", i, i, i)}})
			if err == nil && (res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(i)) {
				err = fmt.Errorf("exec %d: exit %d stdout %q stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

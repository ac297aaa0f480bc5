package bwrap

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

func create(t *testing.T, cfg sandbox.Config) sandbox.Sandbox {
	t.Helper()
	r := newRung(t)
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(t.TempDir(), "state")
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	sb, err := r.Create(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

func run(t *testing.T, sb sandbox.Sandbox, script string) sandbox.ExecResult {
	t.Helper()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// TestSeccomp checks that the filter, not just dropped capabilities, blocks
// ptrace and new user namespaces: both work under bwrap without it.
func TestSeccomp(t *testing.T) {
	sb := create(t, sandbox.Config{})
	cases := []struct{ name, script, want string }{
		{"ptrace TRACEME", `python3 -c "
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(0, 0, 0, 0)
print(r, ctypes.get_errno()); sys.exit(0 if r == 0 else 1)"`, "-1 1\n"},
		{"unshare user namespace", "unshare -Ur true", "Operation not permitted"},
		{"mount in a new user namespace", "unshare -Urm mount -t tmpfs none /tmp", "Operation not permitted"},
	}
	bw, _ := exec.LookPath("bwrap")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, sb, c.script)
			if res.ExitCode == 0 {
				t.Errorf("%s succeeded inside the sandbox: %s", c.name, res.Stdout)
			}
			if !strings.Contains(string(res.Stdout)+string(res.Stderr), c.want) {
				t.Errorf("%s failed, but not with EPERM: stdout %q stderr %q", c.name, res.Stdout, res.Stderr)
			}
			// Control: the same command under bwrap without the filter.
			out, err := exec.Command(bw, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "sh", "-c", c.script).CombinedOutput()
			if err != nil {
				t.Logf("control without seccomp also failed (%v: %s); the check above still holds", err, out)
			} else {
				t.Logf("control: without the filter the same command succeeds")
			}
		})
	}
}

// TestAllowlistBridge runs a command in a sandbox whose network namespace
// has only loopback; its HTTP(S)_PROXY reaches the proxy through the
// in-sandbox forwarder and the bound socket (or the host-side bridge for a
// TCP proxy address). Only allowed hosts get through; nothing else routes.
func TestAllowlistBridge(t *testing.T) {
	target := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from allowed host")
	})}
	tln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go target.Serve(tln)
	t.Cleanup(func() { target.Close() })
	port := tln.Addr().(*net.TCPAddr).Port

	for _, kind := range []string{"unix", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			p := sandboxtest.StartProxy(t, map[string]string{fmt.Sprintf("allowed.test:%d", port): tln.Addr().String()})
			addr := p.UnixAddr
			if kind == "tcp" {
				addr = p.TCPAddr
			}
			sb := create(t, sandbox.Config{Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"allowed.test"}, ProxyAddr: addr}})
			// Plain HTTP through HTTP_PROXY.
			res := run(t, sb, fmt.Sprintf(`python3 -c "
import urllib.request
print(urllib.request.urlopen('http://allowed.test:%d/x', timeout=10).read().decode())"`, port))
			if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello from allowed host") {
				t.Errorf("plain HTTP via proxy: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			// CONNECT to an allowed and to a refused host.
			connect := `python3 -c "
import os, socket, sys
host = sys.argv[1]
proxy = os.environ['HTTPS_PROXY'].split('//')[1].split(':')
s = socket.create_connection((proxy[0], int(proxy[1])), 10)
s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (host, host)).encode())
status = s.recv(1024).decode().split()[1]
if status != '200':
    print('status', status); sys.exit(3)
s.sendall(b'GET / HTTP/1.0\r\nHost: x\r\n\r\n')
data = b''
while True:
    b = s.recv(4096)
    if not b: break
    data += b
print(data.decode().split('\r\n\r\n', 1)[1])" `
			res = run(t, sb, connect+fmt.Sprintf("allowed.test:%d", port))
			if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello from allowed host") {
				t.Errorf("CONNECT to an allowed host: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			res = run(t, sb, connect+"evil.test:443")
			if res.ExitCode != 3 || !strings.Contains(string(res.Stdout), "403") {
				t.Errorf("CONNECT to a refused host: exit %d stdout %q; want 403", res.ExitCode, res.Stdout)
			}
			// No route around the proxy.
			res = run(t, sb, fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)"`, port))
			if res.ExitCode == 0 {
				t.Errorf("direct TCP to the host bypassed the proxy")
			}
			if log := p.Log(); !slices.Contains(log, "refused evil.test:443") {
				t.Errorf("proxy log %q lacks the refused host", log)
			}
			if rep := sb.Report(); rep.Network != sandbox.NetworkAllowlist || rep.ProxyAddr != addr {
				t.Errorf("report network %q proxy %q", rep.Network, rep.ProxyAddr)
			}
		})
	}
}

// TestSnapshotIsNotCopied checks restore's constant-time structure: the
// layer is the very directory the snapshot produced (same inodes), and a
// restored sandbox's private upper directory holds none of its files.
func TestSnapshotIsNotCopied(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "overlay restore needs root; without it roots are copied (reported in Notes)")
	}
	sb := create(t, sandbox.Config{})
	run(t, sb, "head -c 5000000 /dev/urandom > big.bin && mkdir -p /opt/tool && echo v1 > /opt/tool/version")
	layer, err := sb.(sandbox.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(layer.Dir) })
	sb.Close(t.Context())
	big := filepath.Join(layer.Dir, "workspace", "big.bin")
	before, err := os.Stat(big)
	if err != nil {
		t.Fatalf("the layer is not the upper directory holding the sandbox's files: %v", err)
	}

	state := filepath.Join(t.TempDir(), "state")
	sb2 := create(t, sandbox.Config{Layers: []sandbox.Layer{layer}, StateDir: state})
	if out := run(t, sb2, "wc -c < big.bin; cat /opt/tool/version"); string(out.Stdout) != "5000000\nv1\n" {
		t.Fatalf("restored sandbox sees %q", out.Stdout)
	}
	err = filepath.Walk(filepath.Join(state, "upper"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			t.Errorf("restore copied %s into the new sandbox's upper directory", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	if before.Sys().(*syscall.Stat_t).Ino != after.Sys().(*syscall.Stat_t).Ino || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the layer file was replaced or modified by the restore")
	}
}

func TestReport(t *testing.T) {
	sb := create(t, sandbox.Config{Limits: sandbox.Limits{MemoryMB: 300, FileSizeMB: 7, PidsMax: 33}, ReadOnlyRoot: true})
	rep := sb.Report()
	if rep.Rung != "bwrap" || rep.Isolation != sandbox.LevelNamespaced || rep.Network != sandbox.NetworkDeny {
		t.Errorf("report %+v", rep)
	}
	all := strings.Join(rep.Limits, ";")
	for _, want := range []string{"rlimit-fsize=7MB", "timeout="} {
		if !strings.Contains(all, want) {
			t.Errorf("report limits %q lack %q", rep.Limits, want)
		}
	}
	if !strings.Contains(all, "pids.max=33") && !strings.Contains(all, "rlimit-nproc=33") {
		t.Errorf("report limits %q lack a process cap of 33", rep.Limits)
	}
	if !strings.Contains(all, "=300MB") {
		t.Errorf("report limits %q lack the 300 MB memory limit", rep.Limits)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "cgroup") || !strings.Contains(notes, "seccomp") || !strings.Contains(notes, "read-only root") {
		t.Errorf("report notes lack cgroup / seccomp / read-only facts:\n%s", notes)
	}
	t.Logf("report: %+v", rep)
}

func TestCreateRejectsBadConfig(t *testing.T) {
	r := newRung(t)
	for name, cfg := range map[string]sandbox.Config{
		"relative workdir":        {Workdir: "work"},
		"workdir in host /usr":    {Workdir: "/usr/src/app"},
		"unknown network":         {Policy: sandbox.Policy{Network: "some"}},
		"allowlist without proxy": {Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist}},
		"ref-only layer":          {Layers: []sandbox.Layer{{Ref: "sha256:abc"}}},
	} {
		cfg.StateDir = filepath.Join(t.TempDir(), "s")
		if sb, err := r.Create(t.Context(), cfg); err == nil {
			sb.Close(t.Context())
			t.Errorf("%s: Create succeeded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestUser(t *testing.T) {
	sb := create(t, sandbox.Config{User: "nobody"})
	res := run(t, sb, "id -u; id -g; echo x > f && cat f")
	if string(res.Stdout) != "65534\n65534\nx\n" {
		t.Errorf("user nobody: %q %q", res.Stdout, res.Stderr)
	}
	sb = create(t, sandbox.Config{User: "1000:1001"})
	if res := run(t, sb, "id -u; id -g"); string(res.Stdout) != "1000\n1001\n" {
		t.Errorf("user 1000:1001: %q %q", res.Stdout, res.Stderr)
	}
	r := newRung(t)
	if _, err := r.Create(t.Context(), sandbox.Config{User: "no-such-user", StateDir: filepath.Join(t.TempDir(), "s")}); err == nil {
		t.Errorf("an unknown user must be refused")
	}
}

func TestAllowlistNeedsLoaderInImage(t *testing.T) {
	self, _ := os.Executable()
	if elfInterpreter(self) == "" {
		t.Skip("the test binary is static; any image can run the forwarder")
	}
	r := newRung(t)
	_, err := r.Create(t.Context(), sandbox.Config{Root: t.TempDir(), Workdir: "/w", StateDir: filepath.Join(t.TempDir(), "s"),
		Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: "127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("allowlist in an image without the helper's loader: %v; want a clear error", err)
	}
}

// TestImageRoot runs over a minimal image root (no host directories): the
// root is private and writable, or read-only, and snapshots stack over it.
func TestImageRoot(t *testing.T) {
	root := makeRoot(t, 0, "/usr/bin/sh", "/usr/bin/cat", "/usr/bin/ls")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "image-file"), []byte("from image\n"), 0o644)

	sb := create(t, sandbox.Config{Root: root, Workdir: "/app"})
	if res := run(t, sb, "cat /etc/image-file && echo changed > /etc/image-file && echo new > /etc/new && pwd"); string(res.Stdout) != "from image\n/app\n" {
		t.Fatalf("image root: %q %q", res.Stdout, res.Stderr)
	}
	if res := run(t, sb, "ls /usr/bin; test -e /usr/bin/python3 && echo host-leak"); strings.Contains(string(res.Stdout), "host-leak") {
		t.Errorf("the host's /usr is visible in an image sandbox")
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "image-file")); err != nil || string(b) != "from image\n" {
		t.Errorf("the image root was modified: %q %v", b, err)
	}
	layer, err := sb.(sandbox.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(layer.Dir) })

	ro := create(t, sandbox.Config{Root: root, Layers: []sandbox.Layer{layer}, Workdir: "/app", ReadOnlyRoot: true})
	res := run(t, ro, "cat /etc/image-file /etc/new; echo x > /etc/other || echo refused; echo ok > /app/f && cat /app/f")
	if string(res.Stdout) != "changed\nnew\nrefused\nok\n" {
		t.Errorf("read-only root over image + layer: %q %q", res.Stdout, res.Stderr)
	}
}

// Files under a top-level directory that does not exist yet (the checker
// copies tests to /tests) are created, with the directory.
func TestWriteFileUnderNewTopLevelDir(t *testing.T) {
	for _, root := range []string{"", "image"} {
		t.Run("root="+root, func(t *testing.T) {
			cfg := sandbox.Config{}
			if root != "" {
				cfg.Root = t.TempDir()
				for _, d := range []string{"usr", "bin", "lib", "lib64", "etc"} {
					os.Symlink("/"+d, filepath.Join(cfg.Root, d+"-host"))
				}
			}
			sb := create(t, cfg)
			if err := sb.WriteFile(t.Context(), "/tests/run.sh", []byte("echo ok\n"), 0o755); err != nil {
				t.Fatalf("WriteFile under a new top-level dir: %v", err)
			}
			got, err := sb.ReadFile(t.Context(), "/tests/run.sh")
			if err != nil || string(got) != "echo ok\n" {
				t.Fatalf("read back %q, %v", got, err)
			}
		})
	}
}

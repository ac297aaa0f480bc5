package landlock

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
	"evals.si/sandbox/userns"
)

// TestRootInsideIsUnprivilegedOutside: the command is root of a user
// namespace whose map is the report's (0–65535 to a subordinate range when
// the engine is root), holds exactly Docker's default capabilities, and
// cannot write a global sysctl (kernel.core_pattern ran a program as host
// root); Docker's masked paths are hidden.
func TestRootInsideIsUnprivilegedOutside(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	rep := sb.Report()
	m, _, err := userns.ForEngine()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.UIDMap, m.Describe()) || len(rep.UIDMap) == 0 {
		t.Errorf("report uid map %q, want %q", rep.UIDMap, m.Describe())
	}
	if !slices.Equal(rep.Capabilities, sandbox.ContainerCapabilities) {
		t.Errorf("report capabilities %q, want %q", rep.Capabilities, sandbox.ContainerCapabilities)
	}
	before, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	res := run(t, sb, "sh", "-c", `id -u; cat /proc/self/uid_map; grep CapEff /proc/self/status | cut -f2
echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern && echo WROTE-SYSCTL
echo 1 > /proc/sys/vm/drop_caches && echo WROTE-VM`)
	if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(after) != string(before) {
		os.WriteFile("/proc/sys/kernel/core_pattern", before, 0o644)
		t.Fatalf("the sandbox changed kernel.core_pattern to %q", after)
	}
	out := string(res.Stdout)
	if strings.Contains(out, "WROTE") {
		t.Fatalf("a sysctl write succeeded: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || lines[0] != "0" {
		t.Fatalf("want uid 0, uid_map and CapEff; got %q (stderr %q)", out, res.Stderr)
	}
	for i, mp := range m.UID {
		f := strings.Fields(lines[1+i])
		if len(f) != 3 || f[0] != strconv.Itoa(mp.Inside) || f[1] != strconv.Itoa(mp.Outside) || f[2] != strconv.Itoa(mp.Count) {
			t.Errorf("uid_map line %q, want %d %d %d", lines[1+i], mp.Inside, mp.Outside, mp.Count)
		}
	}
	if os.Geteuid() == 0 && (m.UID[0].Outside == 0) {
		t.Errorf("engine is root but the sandbox's root maps to host uid 0")
	}
	if got := sandboxtest.CapNames(t, lines[len(lines)-1]); !slices.Equal(got, sandbox.ContainerCapabilities) {
		t.Errorf("CapEff inside %q, want %q", got, sandbox.ContainerCapabilities)
	}

	// Masked: files read empty, directories are empty; read-only paths
	// refuse writes.
	var script strings.Builder
	for _, p := range sandbox.MaskedPaths {
		fmt.Fprintf(&script, `if [ -d %[1]s ]; then echo "%[1]s $(ls -A %[1]s | wc -l)"; elif [ -e %[1]s ]; then echo "%[1]s $(head -c 100 %[1]s | wc -c)"; fi;`, p)
	}
	for _, p := range sandbox.ReadOnlyPaths {
		fmt.Fprintf(&script, `if [ -e %[1]s ]; then touch %[1]s/x 2>/dev/null || : > %[1]s 2>/dev/null && echo "%[1]s WRITABLE"; fi;`, p)
	}
	masked := run(t, sb, "sh", "-c", script.String())
	for _, l := range strings.Split(strings.TrimSpace(string(masked.Stdout)), "\n") {
		if l != "" && !strings.HasSuffix(l, " 0") {
			t.Errorf("not masked or not read-only: %s", l)
		}
	}
}

// TestContainerCapabilitiesWork: what setup steps of real Dockerfiles do
// (chown, switch to another user, make a device node is refused by the
// mount's nodev but chown and setuid work) works inside.
func TestContainerCapabilitiesWork(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	m, _, _ := userns.ForEngine()
	if !m.Full() {
		testenv.Missing(t, "a full uid map", "the engine's map covers only root: a sandbox cannot switch users here")
	}
	res := run(t, sb, "sh", "-c", `touch f && chown 1000:1000 f && stat -c %u:%g f && setpriv --reuid 1000 --regid 1000 --clear-groups id -u`)
	if res.ExitCode != 0 || string(res.Stdout) != "1000:1000\n1000\n" {
		t.Fatalf("chown and setuid: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestImageFilesOwnedByMappedIDs: image files stored as host ids appear
// owned by the same ids inside (idmapped mounts), and so do the host's
// system directories without an image.
func TestImageFilesOwnedByMappedIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root engine", "idmapped mounts need the engine to be root")
	}
	root := miniRoot(t)
	if err := os.Chown(filepath.Join(root, "workspace/seed.txt"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/owned"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(root, "etc/owned"), 0, 0)
	sb := newSandbox(t, sandbox.Config{Root: root})
	res := run(t, sb, "/bin/sh", "-c", "ls -ln /etc/owned /usr/bin/dash | while read m l u g rest; do echo $u:$g; done")
	if string(res.Stdout) != "0:0\n0:0\n" {
		t.Fatalf("image files inside owned by %q (stderr %q), want 0:0 twice", res.Stdout, res.Stderr)
	}
	host := newSandbox(t, sandbox.Config{})
	res = run(t, host, "stat", "-c", "%u:%g", "/usr/bin/env", "/etc/passwd")
	if string(res.Stdout) != "0:0\n0:0\n" {
		t.Fatalf("host system files inside owned by %q (stderr %q), want 0:0", res.Stdout, res.Stderr)
	}
}

// TestFileOperationsStayInside: file operations resolve in the sandbox's
// root (a symlink to a host path, /etc/mtab without an image), refuse
// FIFOs and other special files promptly, cap reads, and write files that
// root inside owns.
func TestFileOperationsStayInside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, not blocks the run
	defer cancel()
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte("HOST-CANARY"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  sandbox.Config
	}{
		{"no image", sandbox.Config{}},
		{"image", sandbox.Config{Root: miniRoot(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.cfg)
			res := run(t, sb, "/bin/sh", "-c", fmt.Sprintf(`ln -s %s /workspace/link; ln -s %s /tmp/link; mkdir -p /opt/d; ln -s %s /opt/d/link; ln -s /opt/target.txt /workspace/tlink
mkfifo /workspace/fifo /tmp/fifo /opt/d/fifo
: > /workspace/big && dd if=/dev/zero of=/workspace/big bs=1 count=1 seek=%d 2>/dev/null; ls /workspace`, canary, canary, canary, sandbox.MaxReadFile+10))
			if !strings.Contains(string(res.Stdout), "fifo") {
				t.Fatalf("could not make FIFOs in the sandbox: %s %s", res.Stdout, res.Stderr)
			}
			for _, p := range []string{"link", "/tmp/link", "/opt/d/link"} {
				b, err := sb.ReadFile(ctx, p)
				if strings.Contains(string(b), "HOST-CANARY") {
					t.Errorf("ReadFile(%s) followed a symlink to the host's %s", p, canary)
				}
				if err == nil {
					t.Errorf("ReadFile(%s) = %q, want an error (the target is not in the sandbox)", p, b)
				}
				// The target's directory does not exist inside: an error,
				// as for a shell's redirection; the host file is untouched.
				sb.WriteFile(ctx, p, []byte("x"), 0o644)
			}
			if b, _ := os.ReadFile(canary); string(b) != "HOST-CANARY" {
				t.Fatalf("the host file was changed through a symlink: %q", b)
			}
			// A dangling symlink to a path inside creates the target there.
			if err := sb.WriteFile(ctx, "tlink", []byte("through"), 0o644); err != nil {
				t.Errorf("WriteFile(tlink -> /opt/target.txt): %v", err)
			}
			if b, err := sb.ReadFile(ctx, "/opt/target.txt"); err != nil || string(b) != "through" {
				t.Errorf("ReadFile(/opt/target.txt) = %q, %v; want what was written through the symlink", b, err)
			}
			for _, p := range []string{"fifo", "/tmp/fifo", "/opt/d/fifo"} {
				if _, err := sb.ReadFile(ctx, p); err == nil || !strings.Contains(err.Error(), "FIFO") {
					t.Errorf("ReadFile(%s) = %v, want a refusal naming the FIFO", p, err)
				}
				if err := sb.WriteFile(ctx, p, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "FIFO") {
					t.Errorf("WriteFile(%s) = %v, want a refusal naming the FIFO", p, err)
				}
			}
			if ctx.Err() != nil {
				t.Fatal("file operations on FIFOs hung")
			}
			if _, err := sb.ReadFile(ctx, "big"); err == nil || !strings.Contains(err.Error(), "read cap") || !strings.Contains(err.Error(), "big") {
				t.Errorf("ReadFile(big) = %v, want the read cap named with the path", err)
			}
			for _, p := range []string{"new/w.txt", "/opt/e/w.txt"} {
				if err := sb.WriteFile(ctx, p, []byte("v1\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			res = run(t, sb, "/bin/sh", "-c", `for f in /workspace/new/w.txt /opt/e/w.txt; do ls -ln $f | while read m l u g rest; do echo $m $u:$g; done; echo v2 >> $f; done`)
			if want := "-rw------- 0:0\n-rw------- 0:0\n"; string(res.Stdout) != want || res.ExitCode != 0 {
				t.Errorf("written files inside: exit %d %q (stderr %q), want %q", res.ExitCode, res.Stdout, res.Stderr, want)
			}
			if b, err := sb.ReadFile(ctx, "/opt/e/w.txt"); err != nil || string(b) != "v1\nv2\n" {
				t.Errorf("ReadFile after edit = %q, %v", b, err)
			}
			if _, err := sb.ReadFile(ctx, "/workspace/missing"); !os.IsNotExist(err) && !strings.Contains(fmt.Sprint(err), "no such file") {
				t.Errorf("ReadFile(missing) = %v, want not-exist", err)
			}
			done, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := sb.ReadFile(done, "new/w.txt"); err == nil {
				t.Errorf("ReadFile with a cancelled context succeeded")
			}
		})
	}
	t.Run("etc/mtab", func(t *testing.T) {
		state := t.TempDir()
		sb := newSandbox(t, sandbox.Config{StateDir: state})
		b, err := sb.ReadFile(ctx, "/etc/mtab")
		if err != nil {
			t.Fatal(err)
		}
		// The sandbox's own mounts only: its root overlay, none of the
		// host's paths (the state directory, the engine's root).
		if !strings.HasPrefix(string(b), "overlay / ") || strings.Contains(string(b), state) || strings.Contains(string(b), " /work ") {
			t.Fatalf("/etc/mtab is not the sandbox's own mount table:\n%s", b)
		}
		res := run(t, sb, "cat", "/proc/self/mounts")
		if strings.Contains(string(res.Stdout), state) {
			t.Fatalf("the sandbox's mount table names the host's state directory:\n%s", res.Stdout)
		}
	})
}

// TestBlockedAttemptsAreDenials: what the filter refuses (UDP and raw
// sockets, TCP connects under deny and to anything but the forwarder under
// allowlist, ptrace, mount) comes back as the command's denials, while
// what is allowed (a unix socket, the forwarder) leaves none.
func TestBlockedAttemptsAreDenials(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "python3 is needed for the probes")
	}
	proxy := plainTCPListener(t)
	deny := newSandbox(t, sandbox.Config{})
	allowlist := newSandbox(t, sandbox.Config{Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: proxy.Addr().String()}})
	for _, tc := range []struct {
		name string
		sb   *Sandbox
		py   string
		want []string // substrings of denial details, in kind:detail form
	}{
		{"udp", deny, `s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)`, []string{"network:socket (AF_INET, SOCK_DGRAM (UDP, DNS)) refused"}},
		{"tcp under deny", deny, `socket.create_connection(("10.1.2.3", 443), 2)`, []string{"network:TCP connect to 10.1.2.3:443 refused (network deny)"}},
		{"tcp elsewhere under allowlist", allowlist, `socket.create_connection(("10.1.2.3", 22), 2)`, []string{"network:TCP connect to 10.1.2.3:22 refused (network allowlist"}},
		{"tcp6 under deny", deny, `socket.create_connection(("2001:db8::1", 443), 2)`, []string{"network:TCP connect to [2001:db8::1]:443 refused (network deny)"}},
		// The sandbox's own loopback (a service, a test server) is not the
		// network: reaching it is no denial, under either policy.
		{"loopback under deny", deny, `socket.create_connection(("127.0.0.1", 22), 2)`, nil},
		{"loopback under allowlist", allowlist, `socket.create_connection(("127.0.0.1", 22), 2)`, nil},
		{"the forwarder under allowlist", allowlist, `print(socket.create_connection(("127.0.0.1", 3128), 2).recv(10))`, nil},
		{"a unix socket", deny, `l = socket.socket(socket.AF_UNIX); l.bind("/tmp/s"); l.listen(); c = socket.socket(socket.AF_UNIX); c.connect("/tmp/s")`, nil},
		{"ptrace", deny, `import ctypes; ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0)`, []string{"syscall:ptrace refused"}},
		{"mount", deny, `import ctypes; ctypes.CDLL(None).mount(b"none", b"/tmp", b"tmpfs", 0, None)`, []string{"syscall:mount refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.sb, "python3", "-c", "import os, socket\ntry:\n    "+tc.py+"\nexcept OSError as e:\n    print(e)")
			var got []string
			for _, d := range res.Denials {
				got = append(got, d.Kind+":"+d.Detail)
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("denials %q lack %q (stdout %q stderr %q)", got, w, res.Stdout, res.Stderr)
				}
			}
			if tc.want == nil && len(got) > 0 {
				t.Errorf("allowed attempt left denials %q", got)
			}
		})
	}
}

// TestDiskLimit: disk_mb bounds what the workdir, /tmp and the root's
// writable layer hold together, and hitting it is a "disk" denial.
func TestDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root engine", "disk_mb's tmpfs needs the engine to be root")
	}
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 32}})
	res := run(t, sb, "sh", "-c", `for d in /workspace /tmp /opt; do for i in 1 2 3; do head -c 8000000 /dev/zero > $d/f$i 2>/dev/null; done; done; du -cm /workspace /tmp /opt | tail -1`)
	total, _ := strconv.Atoi(strings.Fields(string(res.Stdout) + " 0")[0])
	if total > 32 {
		t.Fatalf("wrote %d MB past disk_mb 32 (stderr %q)", total, res.Stderr)
	}
	found := false
	for _, d := range res.Denials {
		found = found || d.Kind == "disk"
	}
	if !found {
		t.Errorf("no disk denial: %+v", res.Denials)
	}
	if err := sb.WriteFile(context.Background(), "more", make([]byte, 8<<20), 0o644); err == nil {
		t.Errorf("WriteFile past disk_mb succeeded")
	}
	if !strings.Contains(strings.Join(sb.Report().Limits, " "), "disk=32MB") {
		t.Errorf("report limits %q lack the disk bound", sb.Report().Limits)
	}
}

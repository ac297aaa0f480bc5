package bwrap

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv/nethost"
	"evals.si/sandbox"
)

// denialsOf returns the details of res's denials of kind.
func denialsOf(res sandbox.ExecResult, kind string) []string {
	var out []string
	for _, d := range res.Denials {
		if d.Kind == kind {
			out = append(out, d.Detail)
		}
	}
	return out
}

// disk_mb bounds everything the sandbox can write, not each file: 8 files
// of 15 MB under disk_mb=64 land at most 64 MB, the rest fails with ENOSPC,
// and the result carries a disk denial; /tmp and /dev/shm count against
// the same bound, and /dev itself takes no files.
func TestDiskBound(t *testing.T) {
	needRootEngine(t)
	sb := create(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 64, FileSizeMB: 100}})
	res := run(t, sb, `
for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=big$i bs=1M count=15 2>>err.log || echo FAILED $i; done
grep -c "No space left" err.log
du -sm --apparent-size . | cut -f1`)
	out := strings.Fields(string(res.Stdout))
	if len(out) < 2 {
		t.Fatalf("unexpected output: %q %q", res.Stdout, res.Stderr)
	}
	var used int
	fmt.Sscan(out[len(out)-1], &used)
	if used > 64 {
		t.Errorf("%d MB landed in the workdir under disk_mb=64", used)
	}
	if !strings.Contains(string(res.Stdout), "FAILED") || out[len(out)-2] == "0" {
		t.Errorf("no write failed with ENOSPC: %q", res.Stdout)
	}
	if d := denialsOf(res, "disk"); len(d) == 0 {
		t.Errorf("no disk denial: %+v", res.Denials)
	}
	// The bound is shared: with the workdir full, /tmp and /dev/shm take
	// nothing either, and /dev is read-only.
	res = run(t, sb, `
dd if=/dev/zero of=/tmp/t bs=1M count=8 2>&1 | grep -q "No space" && echo TMP-FULL
dd if=/dev/zero of=/dev/shm/s bs=1M count=8 2>&1 | grep -q "No space" && echo SHM-FULL
touch /dev/x 2>/dev/null || echo DEV-RO`)
	for _, want := range []string{"TMP-FULL", "SHM-FULL", "DEV-RO"} {
		if !strings.Contains(string(res.Stdout), want) {
			t.Errorf("want %s: %q %q", want, res.Stdout, res.Stderr)
		}
	}
	// Freeing space frees the bound.
	if res := run(t, sb, "rm -f big* /tmp/t /dev/shm/s && dd if=/dev/zero of=again bs=1M count=30 2>&1"); res.ExitCode != 0 || len(denialsOf(res, "disk")) != 0 {
		t.Errorf("after freeing space: exit %d, denials %+v: %s", res.ExitCode, res.Denials, res.Stdout)
	}
	if got := sb.Report().Limits; !strings.Contains(strings.Join(got, " "), "disk=64MB") {
		t.Errorf("report limits %q lack disk=64MB", got)
	}
}

// Empty files are bounded too (a tmpfs's inodes are memory that size=
// does not count).
func TestDiskBoundInodes(t *testing.T) {
	needRootEngine(t)
	sb := create(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 4}})
	res := run(t, sb, `i=0; while [ $i -lt 5000 ]; do : > f$i || break; i=$((i+1)); done; echo $i`)
	var n int
	fmt.Sscan(string(res.Stdout), &n)
	if n >= 5000 {
		t.Errorf("created %d files under disk_mb=4", n)
	}
	if len(denialsOf(res, "disk")) == 0 {
		t.Errorf("no disk denial after running out of inodes: %+v", res.Denials)
	}
}

// A snapshot of a sandbox with disk_mb is a copy out of its filesystem that
// stacks like a renamed upper directory: files, hard links, modes, a
// deletion (whiteout) and a replaced directory (opaque) all show in a
// sandbox made from it.
func TestDiskBoundSnapshot(t *testing.T) {
	needRootEngine(t)
	snap := func(cfg sandbox.Config, script string) sandbox.Layer {
		t.Helper()
		sb := create(t, cfg)
		if res := run(t, sb, script); res.ExitCode != 0 {
			t.Fatalf("%s: %+v", script, res)
		}
		layer, err := sb.(sandbox.Snapshotter).Snapshot(t.Context())
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		sb.Close(t.Context())
		t.Cleanup(func() { os.RemoveAll(layer.Dir) })
		return layer
	}
	bound := sandbox.Limits{DiskMB: 32}
	l1 := snap(sandbox.Config{Limits: bound}, "echo kept > kept && echo gone > gone && mkdir -p d && echo old > d/old")
	l2 := snap(sandbox.Config{Layers: []sandbox.Layer{l1}, Limits: bound},
		"rm gone && rm -r d && mkdir d && chmod 700 d && echo new > d/new && ln kept hard")
	sb := create(t, sandbox.Config{Layers: []sandbox.Layer{l2, l1}, Limits: bound})
	res := run(t, sb, `cat kept; ls -A d; stat -c '%h %a' hard d; test -e gone || echo GONE`)
	if got, want := string(res.Stdout), "kept\nnew\n2 644\n2 700\nGONE\n"; got != want {
		t.Errorf("from the snapshots: %q, want %q (stderr %q)", got, want, res.Stderr)
	}
}

// A fork bomb under pids_max gives a pids denial: the pids cgroup is the
// binding cap (RLIMIT_NPROC, whose refusals leave no trace, is not set
// when it applies).
func TestForkBombDenial(t *testing.T) {
	needRootEngine(t)
	for _, c := range []struct {
		cgroup, nproc string
	}{
		{"auto", ""},
		// Without cgroups RLIMIT_NPROC caps, and the denial is inferred
		// from the shell's complaint.
		{"off", "rlimit-nproc=64"},
	} {
		t.Run("cgroup="+c.cgroup, func(t *testing.T) {
			sb := create(t, sandbox.Config{Limits: sandbox.Limits{PidsMax: 64, Cgroup: c.cgroup}})
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", `
i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; echo started`}, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if d := denialsOf(res, "pids"); len(d) == 0 {
				t.Errorf("no pids denial: %+v (stderr %.200q)", res.Denials, res.Stderr)
			}
			// The exec server kept the threads it needs.
			if res := run(t, sb, "echo alive"); string(res.Stdout) != "alive\n" {
				t.Errorf("after the fork bomb: %+v", res)
			}
			var nproc string
			for _, l := range sb.Report().Limits {
				if strings.HasPrefix(l, "rlimit-nproc") {
					nproc = l
				}
			}
			if nproc != c.nproc {
				t.Errorf("report limits %q: want RLIMIT_NPROC %q", sb.Report().Limits, c.nproc)
			}
		})
	}
}

// In deny mode, TCP connect and UDP sendto to a host past loopback fail
// as before (the namespace has only lo), the host sees nothing, and each
// attempt is a network denial naming the address; loopback is not one.
func TestNetworkDenials(t *testing.T) {
	needRootEngine(t)
	h := nethost.New(t)
	host, port, _ := net.SplitHostPort(h.Addr)
	sb := create(t, sandbox.Config{})
	res := run(t, sb, fmt.Sprintf(`python3 -c '
import socket
for i in range(50):
    try:
        socket.create_connection(("%[1]s", %[2]s), timeout=2); print("CONNECTED")
    except OSError as e: pass
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: u.sendto(b"x", ("%[1]s", 53)); print("SENT")
except OSError as e: print("udp", e.errno)
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try: s6.sendto(b"x", ("2001:db8::1", 53))
except OSError as e: pass
for a in [("127.0.0.1", 9), ("::1", 9)]:
    try: socket.create_connection(a, timeout=1)
    except OSError: pass
'`, host, port))
	if strings.Contains(string(res.Stdout), "CONNECTED") || strings.Contains(string(res.Stdout), "SENT") {
		t.Errorf("reached the host: %q", res.Stdout)
	}
	if h.Conns() != 0 {
		t.Errorf("the test host saw %d connections", h.Conns())
	}
	got := denialsOf(res, "network")
	all := strings.Join(got, "\n")
	for _, want := range []string{"connect to " + h.Addr, "sendto " + host + ":53", "[2001:db8::1]:53", "(50 times)"} {
		if !strings.Contains(all, want) {
			t.Errorf("network denials lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "127.0.0.1") || strings.Contains(all, "[::1]") {
		t.Errorf("loopback recorded as a denial:\n%s", all)
	}
}

// Distinct attempts are capped per kind, the rest counted.
func TestNetworkDenialsCapped(t *testing.T) {
	needRootEngine(t)
	sb := create(t, sandbox.Config{})
	res := run(t, sb, `python3 -c '
import socket
for i in range(200):
    try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("203.0.113.%d" % (i + 1), 53))
    except OSError: pass
'`)
	got := denialsOf(res, "network")
	if len(got) != 11 || !strings.Contains(got[10], "190 more") {
		t.Errorf("want 10 denials and a count of 190 more, got %d:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// Syscalls the filter refuses still fail with EPERM and now show as
// syscall denials naming the call; a command run as another user, whose
// memory the server reads with its own capability, is supervised too.
func TestSyscallDenials(t *testing.T) {
	needRootEngine(t)
	for _, user := range []string{"", "1000"} {
		t.Run("user="+user, func(t *testing.T) {
			sb := create(t, sandbox.Config{User: user})
			res := run(t, sb, `
mkdir -p /tmp/m
python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None)
print('MOUNT', r, ctypes.get_errno())
r = libc.ptrace(16, os.getppid(), 0, 0)
print('PTRACE', r, ctypes.get_errno())"
unshare -U true 2>/dev/null || echo UNSHARE-REFUSED
kill -TERM 1; kill -KILL 1; kill -0 1; echo KILLED-NOTHING
python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.51.100.7', 53))" 2>/dev/null
true`)
			out := string(res.Stdout)
			for _, want := range []string{"MOUNT -1 1", "PTRACE -1 1", "UNSHARE-REFUSED", "KILLED-NOTHING"} {
				if !strings.Contains(out, want) {
					t.Errorf("want %s: %q %q", want, out, res.Stderr)
				}
			}
			all := strings.Join(denialsOf(res, "syscall"), "\n")
			for _, want := range []string{"ptrace refused", "unshare(CLONE_NEWUSER) refused", "kill(1, 15) ignored", "kill(1, 9) ignored"} {
				if !strings.Contains(all, want) {
					t.Errorf("syscall denials lack %q:\n%s", want, all)
				}
			}
			if strings.Contains(all, "kill(1, 0)") {
				t.Errorf("kill -0 1 (an existence check) recorded:\n%s", all)
			}
			if !strings.Contains(all, "mount refused") {
				t.Errorf("syscall denials lack the mount:\n%s", all)
			}
			if n := strings.Join(denialsOf(res, "network"), "\n"); !strings.Contains(n, "198.51.100.7:53") {
				t.Errorf("network denials lack the sendto:\n%s", n)
			}
			// The server's CAP_SYS_PTRACE is its own: no set of a
			// command's holds it, not even the bounding set a root
			// command's exec draws from.
			st := string(run(t, sb, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status").Stdout)
			for _, line := range strings.Split(strings.TrimSpace(st), "\n") {
				f := strings.Fields(line)
				var v uint64
				if len(f) != 2 {
					t.Fatalf("capabilities: %q", st)
				}
				fmt.Sscanf(f[1], "%x", &v)
				if v&(1<<19) != 0 {
					t.Errorf("a command holds CAP_SYS_PTRACE: %s", line)
				}
			}
		})
	}
}

// A clean command has no denials, also when it uses loopback and unix
// sockets, which the supervisor sees and lets through.
func TestCleanCommandHasNoDenials(t *testing.T) {
	needRootEngine(t)
	sb := create(t, sandbox.Config{})
	res := run(t, sb, `python3 -c '
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.sendall(b"hi"); assert a.recv(2) == b"hi"
u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); u.bind("/tmp/u"); v = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); v.sendto(b"x", "/tmp/u"); assert u.recv(1) == b"x"
print("OK")'`)
	if res.ExitCode != 0 || string(res.Stdout) != "OK\n" || len(res.Denials) != 0 {
		t.Errorf("exit %d, %q %q, denials %+v", res.ExitCode, res.Stdout, res.Stderr, res.Denials)
	}
}

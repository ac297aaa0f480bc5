package guest_test

import (
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv/vmtest"
	"evals.si/sandbox"
	"evals.si/sandbox/qemu"
	"evals.si/sandbox/vm"
)

// TestHardenedInVM boots the guest under QEMU (the qemu rung, the local
// Debian image) and attacks what it hardens: the devices commands see,
// the seccomp filter, PID 1's descriptors.
func TestHardenedInVM(t *testing.T) {
	const repo = "../../.."
	r := vm.New(vm.Options{VMM: qemu.New(qemu.Options{}), Settings: vmtest.Settings(t, repo), CacheDir: vmtest.CacheDir(t)})
	ref, root, digest := vmtest.Image(t, repo)
	sb, err := r.Create(t.Context(), sandbox.Config{Root: root, Image: ref, ImageDigest: digest, Limits: sandbox.Limits{PidsMax: 64, MemoryMB: 256}, Policy: sandbox.Policy{Network: sandbox.NetworkDeny}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	tests := []struct {
		name   string
		script string
		// stdout is what the script must print; denial, when set, a
		// denial of that kind whose detail holds it (the guest sends a
		// refused syscall's number, the host names it).
		stdout string
		denial [2]string
	}{
		{"dev is a container's", "ls /dev | tr '\\n' ' '", "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero ", [2]string{}},
		{"no root disk", "cat /dev/vda >/dev/null 2>&1 || echo refused", "refused\n", [2]string{}},
		// /dev is writable, as a container's: a write to ttyS0 makes a
		// file, not output on the console.
		{"no serial console", "test -e /dev/ttyS0 || test -e /dev/console || echo none; echo hi > /dev/ttyS0 && test -f /dev/ttyS0 && echo file; rm /dev/ttyS0", "none\nfile\n", [2]string{}},
		{"no kmsg or mem", "test -e /dev/kmsg || test -e /dev/mem || echo none", "none\n", [2]string{}},
		{"made nodes open nothing", "for d in /workspace /tmp /dev /dev/shm; do mknod $d/x b 254 0 && { cat $d/x >/dev/null 2>&1 || echo refused; }; rm -f $d/x; done",
			"refused\nrefused\nrefused\nrefused\n", [2]string{}},
		{"devices work", "head -c 4 /dev/urandom | wc -c; echo x > /dev/null && echo null; python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'",
			"4\nnull\n/dev/pts/0\n", [2]string{}},
		{"ptrace refused", `python3 -c '
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(5); os._exit(0)
r = libc.ptrace(16, pid, 0, 0)
print(r, os.strerror(ctypes.get_errno()))
os.kill(pid, 9)'`, "-1 Operation not permitted\n", [2]string{"syscall", "ptrace"}},
		// The numbers are listed (the directory is root's), but no
		// descriptor of the init (the control port) opens, for reading
		// or writing, nor does its environment: it is not dumpable, and
		// commands lack CAP_SYS_PTRACE.
		{"PID 1's descriptors", `n=0; for f in /proc/1/fd/*; do n=$((n+1)); (exec 3<"$f") 2>/dev/null && echo "read $f"; (exec 3>>"$f") 2>/dev/null && echo "wrote $f"; done
test $n -gt 2 && echo listed; cat /proc/1/environ >/dev/null 2>&1 || echo refused`, "listed\nrefused\n", [2]string{}},
		{"no network past loopback", `python3 -c '
import socket
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5)
except OSError as e:
    print("refused")'`, "refused\n", [2]string{"network", "192.0.2.1:80"}},
		{"mount refused", "mount -t tmpfs none /mnt 2>/dev/null || echo refused", "refused\n", [2]string{"syscall", "mount"}},
		// The init joins a command's cgroup for the fork and leaves.
		{"in its own cgroup", "case $(cat /proc/self/cgroup) in 0::/cmd-*) echo own;; esac; grep -qx 1 /sys/fs/cgroup/cgroup.procs && echo init-out", "own\ninit-out\n", [2]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", tt.script}, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exit %d, stdout %q, stderr %q, denials %+v", res.ExitCode, res.Stdout, res.Stderr, res.Denials)
			if string(res.Stdout) != tt.stdout {
				t.Errorf("stdout %q, want %q (stderr %q)", res.Stdout, tt.stdout, res.Stderr)
			}
			if tt.denial[0] != "" {
				found := false
				for _, d := range res.Denials {
					found = found || (d.Kind == tt.denial[0] && strings.Contains(d.Detail, tt.denial[1]))
				}
				if !found {
					t.Errorf("denials %+v, want a %s denial naming %q", res.Denials, tt.denial[0], tt.denial[1])
				}
			}
		})
	}
}

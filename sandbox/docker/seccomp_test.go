package docker

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"evals.si/sandbox"
)

// The patterns match every 32-bit value except the refused ones, each
// value at most once.
func TestComplementPatterns(t *testing.T) {
	for _, refused := range [][]uint32{
		refusedIoctls,
		{0},
		{0xffffffff},
		{0, 0xffffffff, 0x80000000, 0x7fffffff},
		{0x5401, 0x5401}, // duplicates
	} {
		pats := complementPatterns(refused)
		probes := []uint32{0, 1, 0x5401, 0x5413, 0x541b, 0x80000000, 0x7fffffff, 0xffffffff, 0xc0109428}
		for _, v := range refused {
			probes = append(probes, v-1, v, v+1, v^0x80000000, v^1<<8)
		}
		for i := uint32(0); i < 1<<16; i++ {
			probes = append(probes, i*65537+12345)
		}
		for _, v := range probes {
			n := 0
			for _, p := range pats {
				if v&p.mask == p.value {
					n++
				}
			}
			want := 1
			for _, r := range refused {
				if v == r {
					want = 0
				}
			}
			if n != want {
				t.Fatalf("refused %#x: %#x matched by %d of %d patterns, want %d", refused, v, n, len(pats), want)
			}
		}
	}
}

// The profile is Docker's default with ioctl moved out of the
// unconditional allow list into the pattern rules, and nothing else.
func TestSeccompProfileShape(t *testing.T) {
	js, err := seccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction   string `json:"defaultAction"`
		DefaultErrnoRet *uint  `json:"defaultErrnoRet"`
		Syscalls        []struct {
			Names  []string          `json:"names"`
			Action string            `json:"action"`
			Args   []json.RawMessage `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Fatalf("default action %s errno %v: refused ioctls would not get EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	rules := 0
	for _, s := range p.Syscalls {
		for _, n := range s.Names {
			if n != "ioctl" {
				continue
			}
			if s.Action != "SCMP_ACT_ALLOW" || len(s.Args) != 1 || len(s.Names) != 1 {
				t.Errorf("ioctl rule %+v: want an allow rule of ioctl alone with one argument comparison", s)
			}
			rules++
		}
	}
	if want := len(complementPatterns(refusedIoctls)); rules != want {
		t.Errorf("%d ioctl rules, want %d", rules, want)
	}
}

// subvolumeProbe tries, in the current directory, each ioctl that
// creates a btrfs subvolume or a snapshot of the container's subvolume
// (its root), and SUBVOL_CREATE with bits set above the 32 the kernel
// reads, and prints one "name result" line each.
const subvolumeProbe = `
import ctypes, errno, os, struct
libc = ctypes.CDLL(None, use_errno=True)
d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
src = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
def vol_args(name):      # struct btrfs_ioctl_vol_args {__s64 fd; char name[4088];}
    return struct.pack("q4088s", src, name)
def vol_args_v2(name):   # struct btrfs_ioctl_vol_args_v2: fd, transid, flags, 4 u64, name[4040]
    return struct.pack("qQQ32x4040s", src, 0, 0, name)
for label, req, arg in [
    ("SNAP_CREATE", 0x50009401, vol_args(b"snap1")),
    ("SUBVOL_CREATE", 0x5000940E, vol_args(b"nested")),
    ("SNAP_CREATE_V2", 0x50009417, vol_args_v2(b"snap2")),
    ("SUBVOL_CREATE_V2", 0x50009418, vol_args_v2(b"nested2")),
    ("SUBVOL_CREATE_HIGH_BITS", 1 << 32 | 0x5000940E, vol_args(b"nested3")),
]:
    buf = ctypes.create_string_buffer(arg, len(arg))
    r = libc.syscall(16, ctypes.c_long(d), ctypes.c_ulong(req), buf)
    print(label, "created" if r == 0 else errno.errorcode[ctypes.get_errno()])
`

// Under disk_mb=16 neither root nor another user in the container can
// make a btrfs subvolume (which would have a quota group of its own) or a
// snapshot of its layer: each ioctl fails with EPERM, and 40 MB written
// where the nested subvolume would be lands at most 16 MiB, with a disk
// denial.
func TestSeccompRefusesSubvolumes(t *testing.T) {
	for _, tc := range []struct{ user, dir string }{{"", "/workspace"}, {"65534", "/tmp"}} {
		t.Run("user="+tc.user, func(t *testing.T) {
			sb := newSandbox(t, sandbox.Config{User: tc.user, Limits: sandbox.Limits{DiskMB: 16}})
			if rep := strings.Join(sb.Report().Limits, "; "); !strings.Contains(rep, seccompReport) {
				t.Errorf("report limits %q do not name the profile", rep)
			}
			if notes := strings.Join(sb.Report().Notes, "; "); strings.Contains(notes, "not yet bounded") {
				t.Errorf("report still names the nested-subvolume gap: %q", notes)
			}
			res := run(t, sb, sandbox.ExecRequest{Workdir: tc.dir, Argv: []string{"python3", "-c", subvolumeProbe}})
			lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
			if len(lines) != 5 {
				t.Fatalf("probe: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			for _, l := range lines {
				if !strings.HasSuffix(l, " EPERM") {
					t.Errorf("%s (want EPERM)", l)
				}
			}
			res = run(t, sb, sandbox.ExecRequest{Workdir: tc.dir, Argv: []string{"sh", "-c",
				`mkdir -p nested && head -c 40000000 /dev/zero > nested/big 2>/dev/null; wc -c < nested/big`}})
			landed, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
			if err != nil {
				t.Fatalf("stdout %q stderr %q: %v", res.Stdout, res.Stderr, err)
			}
			if landed > 16<<20 {
				t.Errorf("%d bytes landed in the would-be nested subvolume under disk_mb=16", landed)
			}
			if len(denialsOf(res, "disk")) == 0 {
				t.Errorf("no disk denial after 40 MB under disk_mb=16: %+v", res.Denials)
			}
		})
	}
}

// Ioctls other than the refused ones reach the kernel as before: a
// terminal request on a pipe or /dev/null fails with ENOTTY, not EPERM,
// and FIONREAD on a pipe answers.
func TestSeccompKeepsOrdinaryIoctls(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", `
import fcntl, os, termios, errno
r, w = os.pipe()
os.write(w, b"abc")
try:
    fcntl.ioctl(r, termios.TIOCGWINSZ, b"\0" * 8)
    print("TIOCGWINSZ ok")
except OSError as e:
    print("TIOCGWINSZ", errno.errorcode[e.errno])
print("FIONREAD", int.from_bytes(fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4), "little"))
`}})
	if got, want := strings.TrimSpace(string(res.Stdout)), "TIOCGWINSZ ENOTTY\nFIONREAD 3"; got != want {
		t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
	}
	res = run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "stty -a </dev/null"}})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Inappropriate ioctl") {
		t.Errorf("stty -a </dev/null: exit %d, stderr %q; want the usual ENOTTY failure", res.ExitCode, res.Stderr)
	}
}

// The profile loosens nothing Docker's default refuses root in the
// container: new user namespaces and mounts stay refused.
func TestSeccompKeepsRefusals(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	for _, argv := range [][]string{
		{"unshare", "-U", "true"},
		{"unshare", "-m", "true"},
		{"mount", "-t", "tmpfs", "none", "/tmp"},
		{"python3", "-c", `import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(272, 0x10000000); print(r, os.strerror(ctypes.get_errno()))`},
	} {
		res := run(t, sb, sandbox.ExecRequest{Argv: argv})
		out := string(res.Stdout) + string(res.Stderr)
		if !strings.Contains(out, "Operation not permitted") && !strings.Contains(out, "permission denied") {
			t.Errorf("%q as root: exit %d, output %q; want a refusal", argv, res.ExitCode, out)
		}
	}
}

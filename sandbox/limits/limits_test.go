package limits

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// fakeV2 builds a cgroup v2 directory as the kernel would present it to a
// delegated parent: the real hierarchy cannot be used on this hybrid host.
func fakeV2(t *testing.T, controllers string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "evalsi.slice")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), nil, 0o644)
	return dir
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestCgroupV2Writer(t *testing.T) {
	parent := fakeV2(t, "cpuset cpu io memory hugetlb pids")
	cgs, err := OpenV2(parent)
	if err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(parent, "cgroup.subtree_control")) == "" {
		t.Errorf("controllers were not enabled for children")
	}
	g, err := cgs.New("cmd-1", sandbox.Limits{MemoryMB: 64, PidsMax: 10, CPUs: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "cmd-1")
	for file, want := range map[string]string{"memory.max": "67108864", "pids.max": "10", "cpu.max": "150000 100000"} {
		if got := read(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q; want %q", file, got, want)
		}
	}
	if got := g.ProcsFiles(); len(got) != 1 || got[0] != filepath.Join(dir, "cgroup.procs") {
		t.Errorf("ProcsFiles = %v", got)
	}
	if got, want := strings.Join(g.Applied(), ";"), "cgroup-v2 memory.max=64MB;cgroup-v2 pids.max=10;cgroup-v2 cpu.max=150000 100000"; got != want {
		t.Errorf("Applied = %q; want %q", got, want)
	}
	// What the kernel writes after an OOM kill and refused forks.
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 5\n"), 0o644)
	ev, err := g.Events()
	if err != nil || ev.OOMKills != 2 || ev.PidsMax != 5 {
		t.Errorf("Events = %+v, %v; want 2 OOM kills, 5 refused forks", ev, err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup dir not removed: %v", err)
	}
	// Defaults: no memory or cpu limit, the default pids cap.
	g2, err := cgs.New("cmd-2", sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Remove()
	if got := read(t, filepath.Join(parent, "cmd-2", "pids.max")); got != "512" {
		t.Errorf("default pids.max = %q", got)
	}
	if _, err := os.Stat(filepath.Join(parent, "cmd-2", "memory.max")); !os.IsNotExist(err) {
		t.Errorf("memory.max written without a memory limit")
	}
}

func TestOpenV2Refuses(t *testing.T) {
	if _, err := OpenV2(fakeV2(t, "hugetlb")); err == nil || !strings.Contains(err.Error(), `"memory"`) {
		t.Errorf("a hugetlb-only v2 parent (this host's /sys/fs/cgroup/unified) must be refused: %v", err)
	}
	if _, err := OpenV2(t.TempDir()); err == nil {
		t.Errorf("a plain directory must be refused")
	}
}

func TestDetect(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "unified", "user.slice", "evalsid.service"), 0o755)
	ctrl := filepath.Join(root, "unified", "user.slice", "evalsid.service")
	os.WriteFile(filepath.Join(ctrl, "cgroup.controllers"), []byte("memory pids cpu"), 0o644)
	os.WriteFile(filepath.Join(ctrl, "cgroup.subtree_control"), []byte("memory pids cpu"), 0o644)
	h := Host{Root: root, SelfCgroup: "0::/user.slice/evalsid.service\n"}
	c, note, err := Detect("auto", h)
	if err != nil || c == nil || c.Version() != 2 || !strings.Contains(note, "evalsid.service") {
		t.Fatalf("auto with a delegated own cgroup: %v %q %v", c, note, err)
	}

	hybrid := t.TempDir()
	os.MkdirAll(filepath.Join(hybrid, "unified"), 0o755)
	os.WriteFile(filepath.Join(hybrid, "unified", "cgroup.controllers"), []byte("hugetlb"), 0o644)
	for _, ctl := range []string{"pids", "memory/process_api/x"} {
		os.MkdirAll(filepath.Join(hybrid, ctl), 0o755)
	}
	self := "8:pids:/\n4:memory:/process_api/x\n0::/\n"
	c, note, err = Detect("", Host{Root: hybrid, SelfCgroup: self})
	if err != nil || c != nil || !strings.Contains(note, "cgroup v2 unavailable") || !strings.Contains(note, "rlimits") {
		t.Errorf("unprivileged on a hybrid host: %v %q %v; want none, with the reason", c, note, err)
	}
	c, note, err = Detect("auto", Host{Root: hybrid, SelfCgroup: self, Privileged: true})
	if err != nil || c == nil || c.Version() != 1 || !c.HasMemory() {
		t.Fatalf("privileged on a hybrid host: %v %q %v; want v1", c, note, err)
	}
	g, err := c.New("cmd", sandbox.Limits{MemoryMB: 32, PidsMax: 9})
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(hybrid, "pids", "cmd", "pids.max")); got != "9" {
		t.Errorf("v1 pids.max = %q", got)
	}
	if got := read(t, filepath.Join(hybrid, "memory/process_api/x", "cmd", "memory.limit_in_bytes")); got != "33554432" {
		t.Errorf("v1 memory.limit_in_bytes = %q", got)
	}
	os.WriteFile(filepath.Join(hybrid, "memory/process_api/x", "cmd", "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"), 0o644)
	if ev, err := g.Events(); err != nil || ev.OOMKills != 1 {
		t.Errorf("v1 events = %+v, %v", ev, err)
	}
	g.Remove()

	if c, note, err := Detect("off", h); c != nil || err != nil || !strings.Contains(note, "off") {
		t.Errorf("off: %v %q %v", c, note, err)
	}
	if _, _, err := Detect(filepath.Join(root, "missing"), h); err == nil {
		t.Errorf("an explicit unusable path must be an error")
	}
}

func TestRlimits(t *testing.T) {
	p := PlanRlimits(sandbox.Limits{MemoryMB: 100, FileSizeMB: 3, PidsMax: 20}, true)
	var got []string
	for _, r := range p.Outer {
		back, err := ParseRlimit(r.String())
		if err != nil || back != r {
			t.Errorf("round trip of %v: %v, %v", r, back, err)
		}
		got = append(got, r.Describe())
	}
	if strings.Join(got, ",") != "rlimit-as=100MB,rlimit-fsize=3MB,rlimit-core=0" || p.NProc != 20 {
		t.Errorf("plan = %v nproc %d", got, p.NProc)
	}
	if p := PlanRlimits(sandbox.Limits{MemoryMB: 100}, false); len(p.Outer) != 2 {
		t.Errorf("with a memory cgroup RLIMIT_AS must not be set: %v", p.Outer)
	}
	for _, bad := range []string{"as", "stack=1", "as=x"} {
		if _, err := ParseRlimit(bad); err == nil {
			t.Errorf("ParseRlimit(%q) accepted", bad)
		}
	}
	// prlimit on ourselves: lower the core limit, which is harmless.
	if err := (Rlimit{Name: "core", Value: 0}).ApplyTo(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_CORE, &lim)
	if lim.Cur != 0 {
		t.Errorf("RLIMIT_CORE = %d after ApplyTo", lim.Cur)
	}
}

// TestSeccompFilterShape decodes the programs: whole instructions, the arch
// check first, every jump inside the program, and the returns each needs.
// Their effect is tested for real in sandbox/bwrap (TestSeccomp,
// TestSyscallDenials).
func TestSeccompFilterShape(t *testing.T) {
	for _, c := range []struct {
		name string
		make func() ([]byte, error)
		want []uint32
	}{
		{"plain", SeccompFilter, []uint32{retAllow, retEPERM, retENOSYS}},
		{"notify", SeccompNotifyFilter, []uint32{retAllow, retEPERM, retENOSYS, retNotify}},
	} {
		prog, err := c.make()
		if err != nil {
			t.Fatal(err)
		}
		if len(prog)%8 != 0 || len(prog)/8 > 255 {
			t.Fatalf("%s: filter is %d bytes", c.name, len(prog))
		}
		n := len(prog) / 8
		var rets []uint32
		for i := range n {
			code := binary.NativeEndian.Uint16(prog[8*i:])
			jt, jf := int(prog[8*i+2]), int(prog[8*i+3])
			k := binary.NativeEndian.Uint32(prog[8*i+4:])
			if i == 0 && (code != bpfLdWAbs || k != 4) {
				t.Errorf("%s: first instruction must load the arch", c.name)
			}
			if code&0x07 == unix.BPF_JMP && (i+1+jt >= n || i+1+jf >= n) {
				t.Errorf("%s: instruction %d jumps outside the program", c.name, i)
			}
			if code == bpfRetK {
				rets = append(rets, k)
			}
		}
		for _, want := range c.want {
			if !slices.Contains(rets, want) {
				t.Errorf("%s: no return %#x in the filter", c.name, want)
			}
		}
	}
}

// runFilter interprets prog (the instructions the filters use) on one
// struct seccomp_data.
func runFilter(t *testing.T, prog []byte, nr int, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.NativeEndian.PutUint32(data[0:], uint32(nr))
	binary.NativeEndian.PutUint32(data[4:], auditArch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog)/8; pc++ {
		code := binary.NativeEndian.Uint16(prog[8*pc:])
		jt, jf := int(prog[8*pc+2]), int(prog[8*pc+3])
		k := binary.NativeEndian.Uint32(prog[8*pc+4:])
		jump := func(cond bool) {
			if cond {
				pc += jt
			} else {
				pc += jf
			}
		}
		switch code {
		case bpfLdWAbs:
			acc = binary.NativeEndian.Uint32(data[k:])
		case bpfJeqK:
			jump(acc == k)
		case bpfJgeK:
			jump(acc >= k)
		case bpfJsetK:
			jump(acc&k != 0)
		case bpfRetK:
			return k
		default:
			t.Fatalf("instruction %d: unknown code %#x", pc, code)
		}
	}
	t.Fatal("the filter ran off its end")
	return 0
}

// The notifying filter passes refusals and the watched calls up, and only
// those: what the plain filter refuses is never allowed by it.
func TestSeccompNotifyFilter(t *testing.T) {
	plain, err := SeccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	notify, err := SeccompNotifyFilter()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		nr           int
		args         []uint64
		plain, notif uint32
	}{
		{"mount", unix.SYS_MOUNT, nil, retEPERM, retNotify},
		{"ptrace", unix.SYS_PTRACE, []uint64{16, 1}, retEPERM, retNotify},
		{"unshare user", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, retEPERM, retNotify},
		{"unshare mount", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNS}, retAllow, retAllow},
		{"clone3", unix.SYS_CLONE3, nil, retENOSYS, retENOSYS},
		{"connect", unix.SYS_CONNECT, nil, retAllow, retNotify},
		{"sendto connected", unix.SYS_SENDTO, []uint64{3, 0, 1, 0, 0, 0}, retAllow, retAllow},
		{"sendto address", unix.SYS_SENDTO, []uint64{3, 0, 1, 0, 0x7f0000001000, 16}, retAllow, retNotify},
		{"sendto address above 4 GiB", unix.SYS_SENDTO, []uint64{3, 0, 1, 0, 1 << 32, 16}, retAllow, retNotify},
		{"sendmsg", unix.SYS_SENDMSG, nil, retAllow, retNotify},
		{"sendmmsg", unix.SYS_SENDMMSG, nil, retAllow, retNotify},
		{"kill pid 1", unix.SYS_KILL, []uint64{1, 9}, retAllow, retNotify},
		{"kill other", unix.SYS_KILL, []uint64{7, 9}, retAllow, retAllow},
		{"kill pid 1+2^32", unix.SYS_KILL, []uint64{1 | 1<<32, 9}, retAllow, retAllow},
		{"tgkill pid 1", unix.SYS_TGKILL, []uint64{1, 1, 15}, retAllow, retNotify},
		{"read", unix.SYS_READ, nil, retAllow, retAllow},
		{"x32", 0x40000000 | unix.SYS_MOUNT, nil, retEPERM, retEPERM},
	} {
		if c.name == "x32" && runtime.GOARCH != "amd64" {
			continue
		}
		if got := runFilter(t, plain, c.nr, c.args...); got != c.plain {
			t.Errorf("%s: plain filter returns %#x, want %#x", c.name, got, c.plain)
		}
		if got := runFilter(t, notify, c.nr, c.args...); got != c.notif {
			t.Errorf("%s: notifying filter returns %#x, want %#x", c.name, got, c.notif)
		}
	}
	for _, s := range append(deniedSyscalls, archDenied...) {
		if got := runFilter(t, notify, int(s.nr)); got != retNotify {
			t.Errorf("%s: notifying filter returns %#x, want notify", s.name, got)
		}
		if SyscallName(int(s.nr)) != s.name {
			t.Errorf("SyscallName(%d) = %q, want %q", s.nr, SyscallName(int(s.nr)), s.name)
		}
	}
}

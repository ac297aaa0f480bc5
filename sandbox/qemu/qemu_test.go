package qemu

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox/vm"
)

// guest is what the tests boot: a kernel and an initramfs whose /init is
// testdata/echoinit.
type guest struct {
	kernel, initrd string
}

// needQEMU skips (or fails, under EVALSI_STRICT=1) without QEMU.
func needQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.Missing(t, "qemu-system-x86_64", "not on PATH (apt-get install qemu-system-x86)")
	}
}

// findKernel returns a Debian guest kernel: the one
// scripts/build-vm-kernel.sh caches, else the lead's extraction under
// /tmp/kern/root.
func findKernel(t *testing.T) string {
	t.Helper()
	for _, root := range []string{"/var/cache/evalsi/vmkernel/current", "/tmp/kern/root"} {
		ks, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
		if len(ks) > 0 {
			return ks[0]
		}
	}
	testenv.Missing(t, "a guest kernel", "none under /var/cache/evalsi/vmkernel/current/boot or /tmp/kern/root/boot (run scripts/build-vm-kernel.sh)")
	return ""
}

// buildGuest builds testdata/echoinit and its initramfs (with the
// modules vm.BuildInitramfs picks for the kernel).
func buildGuest(t *testing.T) guest {
	t.Helper()
	needQEMU(t)
	kernel := findKernel(t)
	dir := t.TempDir()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(dir, "init")
	cmd := exec.Command(gobin, "build", "-o", bin, "./testdata/echoinit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test guest: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := vm.BuildInitramfs(context.Background(), initrd, bin, kernel); err != nil {
		t.Fatal(err)
	}
	return guest{kernel: kernel, initrd: initrd}
}

// machineDir is a directory for a machine's logs, whose name is on its
// QEMU's command line (qemuPIDs finds it there); a failed test prints
// the logs before the directory is removed.
func machineDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "qemu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			con, _ := os.ReadFile(filepath.Join(d, "console.log"))
			ql, _ := os.ReadFile(filepath.Join(d, "qemu.log"))
			t.Logf("%s: console.log:\n%s\nqemu.log:\n%s", d, tailString(string(con), 3000), ql)
		}
		os.RemoveAll(d)
	})
	return d
}

func rawDisk(t *testing.T, dir, name string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// overlay makes a qcow2 file over the raw base, as a restored copy's disk.
func overlay(t *testing.T, base, dst string) string {
	t.Helper()
	return overlayOf(t, base, "raw", dst)
}

// overlayOf makes a qcow2 file over base of format baseFormat.
func overlayOf(t *testing.T, base, baseFormat, dst string) string {
	t.Helper()
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", baseFormat, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}
	return dst
}

// qemuPIDs lists the QEMU processes whose command line mentions dir.
func qemuPIDs(t *testing.T, dir string) []string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("qemu-system")) && bytes.Contains(b, []byte(dir)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// runsAs reads the real, effective, saved and filesystem uids and gids
// and the supplementary groups of process pid.
func runsAs(t *testing.T, pid int) (uids, gids, groups string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			uids = v
		case "Gid":
			gids = v
		case "Groups":
			groups = v
		}
	}
	return uids, gids, groups
}

// checkRunsAs checks machine m's QEMU runs as uid:gid with no
// supplementary groups, when the engine is root (else as the engine).
// leased stands for the machine's own leased id (ids.go) in checkRunsAs.
const leased = -1

func checkRunsAs(t *testing.T, m vm.Machine, uid, gid int) {
	t.Helper()
	if uid == leased && os.Geteuid() == 0 {
		uid = m.(*machine).lease.id
		gid = uid
		if uid < DefaultID || uid >= DefaultID+idCount {
			t.Fatalf("machine's id %d is not one of the leased range [%d, %d)", uid, DefaultID, DefaultID+idCount)
		}
	}
	if os.Geteuid() != 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	pid := m.(*machine).cmd.Process.Pid
	uids, gids, groups := runsAs(t, pid)
	want := func(id int) string { return strings.TrimSpace(strings.Repeat(strconv.Itoa(id)+" ", 4)) }
	if uids != want(uid) || gids != want(gid) || (os.Geteuid() == 0 && groups != "") {
		t.Fatalf("qemu (pid %d) runs as uids %q, gids %q, groups %q; want uids %q, gids %q, no groups", pid, uids, gids, groups, want(uid), want(gid))
	}
}

// session reads the guest's lines off a control channel.
type session struct {
	t *testing.T
	c io.ReadWriteCloser
	r *bufio.Reader
}

func newSession(t *testing.T, c io.ReadWriteCloser) *session {
	return &session{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
}

// readLine reads one line within d, killing the wait by closing the
// channel when it takes longer.
func (s *session) readLine(d time.Duration) string {
	s.t.Helper()
	timer := time.AfterFunc(d, func() { s.c.Close() })
	defer timer.Stop()
	line, err := s.r.ReadString('\n')
	if err != nil {
		s.t.Fatalf("reading the guest's line (waited up to %s): %v (got %q)", d, err, line)
	}
	return strings.TrimSuffix(line, "\n")
}

// echo writes msg and checks the guest sends it back.
func (s *session) echo(msg []byte) {
	s.t.Helper()
	go s.c.Write(msg)
	got := make([]byte, len(msg))
	timer := time.AfterFunc(30*time.Second, func() { s.c.Close() })
	defer timer.Stop()
	if _, err := io.ReadFull(s.r, got); err != nil {
		s.t.Fatalf("reading the echo of %d bytes: %v", len(msg), err)
	}
	if !bytes.Equal(got, msg) {
		s.t.Fatalf("echo differs: sent %d bytes, got back %q…", len(msg), got[:min(len(got), 64)])
	}
}

// bootTimeout bounds a TCG boot to the guest's first line: about 8 s on a
// 2-core test machine, so with room for a loaded one.
const bootTimeout = 40 * time.Second

// floodBytes is what TestConsoleFlood's guest writes to its console, and
// floodTimeout how long that may take (a serial port under TCG moves a
// few MB/s).
const (
	floodBytes   = 4 << 20
	floodTimeout = 120 * time.Second
)

func TestCheck(t *testing.T) {
	needQEMU(t)
	t.Setenv("EVALSI_QEMU_KVM", "")
	cases := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"default", Options{}, ""},
		{"tcg", Options{Accel: "tcg"}, ""},
		{"bad accel", Options{Accel: "hvf"}, `accelerator "hvf"`},
		{"missing binary", Options{Binary: "/nonexistent/qemu-system-x86_64"}, "apt-get install qemu-system-x86"},
		{"binary without microvm", Options{Binary: "/bin/true"}, "no microvm machine"},
		{"negative uid", Options{UID: -1}, "not negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := New(c.opts)
			err := v.Check(context.Background())
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				// auto without EVALSI_QEMU_KVM=1 means TCG (see Options.Accel).
				if a, err := v.Accel(context.Background()); err != nil || a != "tcg" {
					t.Fatalf("accel = %q, %v; want tcg", a, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Check = %v; want an error containing %q", err, c.wantErr)
			}
		})
	}
}

// TestKVMProbe runs the KVM probe when /dev/kvm opens. On a host where KVM
// works it must pass; on one where it does not, it must say why. Either
// way it must finish: a hanging KVM is the case it exists for.
func TestKVMProbe(t *testing.T) {
	needQEMU(t)
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		testenv.Missing(t, "/dev/kvm", err.Error())
	}
	f.Close()
	v := New(Options{Accel: "kvm"})
	start := time.Now()
	a, err := v.Accel(context.Background())
	t.Logf("kvm probe: accel %q, err %v, in %s", a, err, time.Since(start))
	if err == nil && a != "kvm" {
		t.Fatalf("accel kvm resolved to %q", a)
	}
	if err != nil && !strings.Contains(err.Error(), "kvm") {
		t.Fatalf("probe error does not name kvm: %v", err)
	}
}

func TestBootEchoKill(t *testing.T) {
	g := buildGuest(t)
	dir := machineDir(t)
	root := rawDisk(t, dir, "root.img", 8<<20)
	data := rawDisk(t, dir, "data.img", 4<<20)
	v := New(Options{Accel: "tcg"})
	start := time.Now()
	m, err := v.Boot(context.Background(), vm.BootSpec{
		Kernel: g.kernel, Initrd: g.initrd, Cmdline: "loglevel=4",
		Disks:    []vm.Disk{{Path: root, Format: "raw"}, {Path: data, Format: "raw", ReadOnly: true}},
		VCPUs:    1,
		MemoryMB: 256,
		Dir:      dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	connected := time.Since(start)
	s := newSession(t, m.Control())
	hello := s.readLine(bootTimeout)
	t.Logf("control connected after %s, guest's first line after %s: %q", connected, time.Since(start), hello)
	// The disks in order, the second read-only, and the entropy device.
	if want := "hello blocks=vda:16384:ro=0,vdb:8192:ro=1 rng=virtio_rng.0"; hello != want {
		t.Fatalf("guest said %q; want %q", hello, want)
	}
	s.echo([]byte("ping\n"))
	big := make([]byte, 200<<10)
	rand.Read(big)
	s.echo(big)

	checkRunsAs(t, m, leased, leased)

	// -nodefaults leaves the machine without a network device.
	qm := m.(*machine)
	var network string
	if err := qm.qmp.execute(context.Background(), "human-monitor-command", map[string]any{"command-line": "info network"}, &network); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(network) != "" {
		t.Fatalf("the machine has network devices: %q", network)
	}
	// The log's file is written a little after the console (from a
	// goroutine of vmproc.Console's).
	var con []byte
	for deadline := time.Now().Add(5 * time.Second); !bytes.Contains(con, []byte("echoinit: hello")); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("console.log lacks the guest's output: %q", tailString(string(con), 500))
		}
		con, _ = os.ReadFile(filepath.Join(dir, "console.log"))
	}

	pid := qm.cmd.Process.Pid
	if err := m.Err(); err != nil {
		t.Fatalf("Err of a running machine = %v", err)
	}
	for range 2 {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done is open after Kill")
	}
	var ee *ExitError
	if !errors.As(m.Err(), &ee) || !ee.Killed || !strings.Contains(ee.State, "killed") {
		t.Fatalf("Err after Kill = %v; want a killed ExitError", m.Err())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("qemu pid %d still exists after Kill (kill 0: %v)", pid, err)
	}
	if pids := qemuPIDs(t, dir); len(pids) > 0 {
		t.Fatalf("qemu processes left for %s: %v", dir, pids)
	}
}

func TestSaveRestoreTwice(t *testing.T) {
	g := buildGuest(t)
	dir := machineDir(t)
	base := rawDisk(t, dir, "root.img", 8<<20)
	v := New(Options{Accel: "tcg"})
	spec := func(d, disk, format string) vm.BootSpec {
		return vm.BootSpec{
			Kernel: g.kernel, Initrd: g.initrd, Cmdline: "loglevel=4",
			Disks: []vm.Disk{{Path: disk, Format: format}}, VCPUs: 1, MemoryMB: 256, Dir: d,
		}
	}
	start := time.Now()
	m, err := v.Boot(context.Background(), spec(dir, base, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	s := newSession(t, m.Control())
	if hello := s.readLine(bootTimeout); !strings.HasPrefix(hello, "hello blocks=vda") {
		t.Fatalf("guest said %q", hello)
	}
	boot := time.Since(start)
	s.echo([]byte("before save\n"))

	state := filepath.Join(dir, "snap")
	start = time.Now()
	if err := v.Save(context.Background(), m, state); err != nil {
		t.Fatal(err)
	}
	save := time.Since(start)
	<-m.Done()
	var ee *ExitError
	if !errors.As(m.Err(), &ee) || !ee.Saved || ee.Killed {
		t.Fatalf("Err after Save = %v; want a saved ExitError", m.Err())
	}
	st, err := os.Stat(filepath.Join(state, stateFile))
	if err != nil {
		t.Fatal(err)
	}

	// Two copies at once, each on an overlay of the saved disk and its own
	// control channel.
	var copies []vm.Machine
	var restores []time.Duration
	for i := range 2 {
		d := machineDir(t)
		start := time.Now()
		c, err := v.Restore(context.Background(), spec(d, overlay(t, base, filepath.Join(d, "root.qcow2")), "qcow2"), state)
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		defer c.Kill()
		restores = append(restores, time.Since(start))
		copies = append(copies, c)
	}
	if os.Geteuid() == 0 && copies[0].(*machine).lease.id == copies[1].(*machine).lease.id {
		t.Errorf("both copies run as id %d: each machine's QEMU must have its own", copies[0].(*machine).lease.id)
	}
	for i, c := range copies {
		checkRunsAs(t, c, leased, leased)
		s := newSession(t, c.Control())
		s.echo(fmt.Appendf(nil, "copy %d says hi\n", i))
		big := make([]byte, 100<<10)
		rand.Read(big)
		s.echo(big)
	}
	t.Logf("TCG, 256 MB, 1 vCPU: boot to the guest's first line %s; save %s (%d MB of state); restores %v",
		boot.Round(time.Millisecond), save.Round(time.Millisecond), st.Size()>>20, restores)
	for _, c := range copies {
		c.Kill()
		if err := c.Err(); err == nil {
			t.Fatal("Err is nil after Kill")
		}
	}
}

// TestRootOnlyFiles: a machine whose kernel, initramfs and disks only root
// can read (0600, in a 0700 directory) boots, with QEMU as its own user
// (here ids set in Options), through the descriptors the engine opens:
// the guest reads its first disk through the chain top over middle over
// base, its writes land in the top alone, and the read-only disk is
// read-only.
func TestRootOnlyFiles(t *testing.T) {
	g := buildGuest(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the test checks that QEMU, dropped to its own user, boots files only root can read")
	}
	if _, err := exec.LookPath("qemu-io"); err != nil {
		testenv.Missing(t, "qemu-io", "not on PATH (apt-get install qemu-utils)")
	}
	priv, err := os.MkdirTemp("", "qemu-private-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(priv)
	if err := os.Chmod(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := func(src, name string) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(priv, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kernel, initrd := cp(g.kernel, "vmlinuz"), cp(g.initrd, "initrd.cpio")
	marker := []byte("base-marker-0123")
	base := rawDisk(t, priv, "base.raw", 8<<20)
	f, err := os.OpenFile(base, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(marker, 0)
	f.Close()
	mid := overlayOf(t, base, "raw", filepath.Join(priv, "mid.qcow2"))
	// The middle's first sector is 'm's: the guest sees them only if the
	// top's backing is the middle, and the middle's the base.
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -q -P 0x6d 0 512", mid).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	top := overlayOf(t, mid, "qcow2", filepath.Join(priv, "top.qcow2"))
	for _, p := range []string{kernel, initrd, base, mid, top} {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	uid, gid := DefaultID+1, DefaultID+2
	// QEMU's user cannot read them by path, or the test proves nothing.
	cat := exec.Command("cat", base)
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	if out, err := cat.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("uid %d reads %s by path (%v: %.100q)", uid, base, err, out)
	}

	dir := machineDir(t)
	v := New(Options{Accel: "tcg", UID: uid, GID: gid})
	const stamp = "stamped-in-the-top"
	m, err := v.Boot(context.Background(), vm.BootSpec{
		Kernel: kernel, Initrd: initrd, Cmdline: "loglevel=4 echoinit.peek=1 echoinit.stamp=vda:" + stamp,
		Disks: []vm.Disk{{Path: top, Format: "qcow2"}, {Path: base, Format: "raw", ReadOnly: true}},
		Dir:   dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	checkRunsAs(t, m, uid, gid)
	hello := newSession(t, m.Control()).readLine(bootTimeout)
	want := fmt.Sprintf("hello blocks=vda:16384:ro=0:head=%x,vdb:16384:ro=1:head=%x rng=virtio_rng.0", bytes.Repeat([]byte{'m'}, 16), marker)
	if hello != want {
		t.Fatalf("guest said %q; want %q", hello, want)
	}
	m.Kill()
	for _, c := range []struct {
		path string
		has  bool
	}{{top, true}, {mid, false}, {base, false}} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(stamp)) != c.has {
			t.Errorf("%s holds the guest's write: %v; want %v", c.path, !c.has, c.has)
		}
	}
}

// TestProbeGuest runs the KVM probe's firmware, a sealed memfd, under TCG
// as QEMU's own user: the probe's way of running QEMU works.
func TestProbeGuest(t *testing.T) {
	needQEMU(t)
	cases := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"default user", Options{}, ""},
		{"negative id", Options{UID: -1}, "not negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := New(c.opts).probeGuest(context.Background(), "tcg")
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("probeGuest = %v; want an error containing %q", err, c.wantErr)
			}
		})
	}
}

func TestRestoreRefusesAnotherMachine(t *testing.T) {
	dir := machineDir(t)
	state := filepath.Join(dir, "snap")
	os.MkdirAll(state, 0o700)
	v := New(Options{Accel: "tcg"})
	spec := vm.BootSpec{Kernel: "/k", Dir: dir, MemoryMB: 256, VCPUs: 1}
	if _, err := v.Restore(context.Background(), spec, state); err == nil || !strings.Contains(err.Error(), "no complete saved state") {
		t.Fatalf("Restore from an empty dir = %v", err)
	}
	meta := `{"format":"evalsi-qemu-snapshot-1","accel":"tcg","memory_mb":512,"vcpus":1,"disks":null,"state_bytes":1}`
	os.WriteFile(filepath.Join(state, metaFile), []byte(meta), 0o600)
	if _, err := v.Restore(context.Background(), spec, state); err == nil || !strings.Contains(err.Error(), "MemoryMB:512") {
		t.Fatalf("Restore with other memory = %v", err)
	}
}

// TestFailures: a machine that cannot start says what QEMU said, and one
// whose guest dies says how, with the console's tail.
func TestFailures(t *testing.T) {
	g := buildGuest(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, bytes.Repeat([]byte("not a kernel "), 1000), 0o600)
	cases := []struct {
		name           string
		kernel, initrd string
		// bootErr: Boot fails with it; exitErr: the machine boots and
		// ends with it in Err.
		bootErr, exitErr string
	}{
		{name: "kernel missing", kernel: "/nonexistent/vmlinuz", initrd: g.initrd, bootErr: "/nonexistent/vmlinuz"},
		{name: "not a kernel", kernel: garbage, initrd: g.initrd, bootErr: "qemu said"},
		// Without an initramfs the kernel finds no root and panics;
		// panic=-1 and -no-reboot end QEMU.
		{name: "guest panics", kernel: g.kernel, exitErr: "Kernel panic"},
	}
	v := New(Options{Accel: "tcg"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := machineDir(t)
			m, err := v.Boot(context.Background(), vm.BootSpec{Kernel: c.kernel, Initrd: c.initrd, Dir: d})
			if c.bootErr != "" {
				if err == nil {
					m.Kill()
					t.Fatalf("Boot succeeded; want an error containing %q", c.bootErr)
				}
				if !strings.Contains(err.Error(), c.bootErr) {
					t.Fatalf("Boot = %v; want an error containing %q", err, c.bootErr)
				}
				t.Logf("Boot: %v", err)
				if pids := qemuPIDs(t, d); len(pids) > 0 {
					t.Fatalf("qemu left running: %v", pids)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Kill()
			select {
			case <-m.Done():
			case <-time.After(bootTimeout):
				t.Fatalf("the machine did not end in %s", bootTimeout)
			}
			var ee *ExitError
			if !errors.As(m.Err(), &ee) || ee.Killed || !strings.Contains(ee.Console, c.exitErr) {
				t.Fatalf("Err = %v; want the console tail to contain %q", m.Err(), c.exitErr)
			}
			t.Logf("Err: %.300s…", m.Err())
		})
	}
}

// TestBootCancelled: a Boot whose ctx ends before it returns leaves no
// QEMU behind.
func TestBootCancelled(t *testing.T) {
	g := buildGuest(t)
	d := machineDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m, err := New(Options{Accel: "tcg"}).Boot(ctx, vm.BootSpec{Kernel: g.kernel, Initrd: g.initrd, Dir: d})
	if err == nil {
		m.Kill()
		t.Fatal("Boot with a cancelled ctx succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Boot = %v; want context.Canceled", err)
	}
	if pids := qemuPIDs(t, d); len(pids) > 0 {
		t.Fatalf("qemu left running: %v", pids)
	}
}

func TestParseTSC(t *testing.T) {
	cases := []struct {
		name    string
		cpuinfo string
		khz     int
		ok      bool
	}{
		{"constant tsc", "processor\t: 0\ncpu MHz\t\t: 2100.000\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n\nprocessor\t: 1\ncpu MHz\t\t: 1800.000\n", 2100000, true},
		{"no constant_tsc", "cpu MHz\t\t: 2100.000\nflags\t\t: fpu tsc\n", 0, false},
		{"no rate", "flags\t\t: constant_tsc\n", 0, false},
		{"empty", "", 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if khz, ok := parseTSC(c.cpuinfo); khz != c.khz || ok != c.ok {
				t.Fatalf("parseTSC = %d, %v; want %d, %v", khz, ok, c.khz, c.ok)
			}
		})
	}
}

// TestConsoleFlood: a guest writing far more to its serial console than
// the log keeps leaves a console.log of the console's two ends and a
// marker, and the machine answers on its control channel and its monitor
// while it floods.
func TestConsoleFlood(t *testing.T) {
	g := buildGuest(t)
	dir := machineDir(t)
	v := New(Options{Accel: "tcg"})
	m, err := v.Boot(context.Background(), vm.BootSpec{
		Kernel: g.kernel, Initrd: g.initrd, Cmdline: "loglevel=4 echoinit.flood=" + strconv.Itoa(floodBytes),
		Disks: []vm.Disk{{Path: rawDisk(t, dir, "root.img", 8<<20), Format: "raw"}}, Dir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	qm := m.(*machine)
	s := newSession(t, m.Control())
	if hello := s.readLine(bootTimeout); !strings.HasPrefix(hello, "hello blocks=vda") {
		t.Fatalf("guest said %q", hello)
	}
	start := time.Now()
	var slowest time.Duration
	for i := 0; ; i++ {
		if strings.Contains(qm.con.Tail(200), "echoinit: flood ends") {
			break
		}
		if time.Since(start) > floodTimeout {
			t.Fatalf("the flood did not end in %s (%d bytes dropped so far)", floodTimeout, qm.con.Dropped())
		}
		t0 := time.Now()
		s.echo(fmt.Appendf(nil, "echo %d during the flood\n", i))
		var status struct {
			Status string `json:"status"`
		}
		if err := qm.qmp.execute(context.Background(), "query-status", nil, &status); err != nil || status.Status != "running" {
			t.Fatalf("query-status during the flood = %+v, %v", status, err)
		}
		slowest = max(slowest, time.Since(t0))
		time.Sleep(200 * time.Millisecond)
	}
	flood := time.Since(start)
	t.Logf("%d bytes of console in %s (%.1f MB/s); the slowest echo and monitor round trip during it took %s",
		floodBytes, flood.Round(time.Millisecond), float64(floodBytes)/flood.Seconds()/1e6, slowest.Round(time.Millisecond))
	if slowest > 5*time.Second {
		t.Errorf("an echo and a query-status took %s during the flood: the machine stalls", slowest)
	}

	// The file follows within a flush interval or so.
	path := filepath.Join(dir, "console.log")
	var con []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		con, _ = os.ReadFile(path)
		if bytes.Contains(con[max(len(con)-200, 0):], []byte("echoinit: flood ends")) || time.Now().After(deadline) {
			break
		}
	}
	checkFloodLog(t, con, qm.con.Dropped())
	s.echo([]byte("after the flood\n"))
	m.Kill()
	var ee *ExitError
	if !errors.As(m.Err(), &ee) || !strings.Contains(ee.Console, "echoinit: flood ends") {
		t.Fatalf("Err's console tail after the flood = %v", m.Err())
	}
}

// checkFloodLog checks a console.log left by echoinit's flood: at most
// 130 KiB, the console's start (the guest's hello and the flood's first
// lines), the marker counting what was dropped, and the flood's end.
func checkFloodLog(t *testing.T, con []byte, dropped int64) {
	t.Helper()
	if len(con) > 130<<10 {
		t.Fatalf("console.log is %d bytes, over 130 KiB", len(con))
	}
	text := string(con)
	i := strings.Index(text, "\n[evalsi: ")
	if i < 0 {
		t.Fatalf("console.log (%d bytes) has no marker of dropped output; it ends %q", len(con), tailString(text, 300))
	}
	headPart, rest := text[:i], text[i:]
	for _, want := range []string{"echoinit: hello blocks=vda", "echoinit: flood begins", "echoinit: flood line 0,"} {
		if !strings.Contains(headPart, want) {
			t.Errorf("console.log's first part lacks %q", want)
		}
	}
	if want := fmt.Sprintf("[evalsi: %d bytes of console output dropped here", dropped); dropped < floodBytes-(130<<10) || !strings.HasPrefix(rest, "\n"+want) {
		t.Errorf("marker %q, want %q with most of the %d-byte flood", tailString(rest[:min(len(rest), 150)], 150), want, floodBytes)
	}
	if !regexp.MustCompile(`echoinit: flood ends after \S+\r?\n$`).MatchString(text) {
		t.Errorf("console.log does not end with the flood's end: %q", tailString(text, 200))
	}
}

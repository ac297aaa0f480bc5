package firecracker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox/vm"
)

// machineFiles makes a machine directory with a kernel, an initrd and a
// raw root disk holding content.
func machineFiles(t *testing.T, content string) vm.BootSpec {
	t.Helper()
	dir := t.TempDir()
	files := t.TempDir()
	spec := vm.BootSpec{
		Kernel: filepath.Join(files, "vmlinux"),
		Initrd: filepath.Join(files, "initrd.cpio"),
		Disks:  []vm.Disk{{Path: filepath.Join(files, "root.img"), Format: "raw"}},
		Dir:    dir, VCPUs: 2, MemoryMB: 512,
		Cmdline: "loglevel=4",
	}
	for path, data := range map[string]string{spec.Kernel: "\x7fELF kernel", spec.Initrd: "070701 initrd", spec.Disks[0].Path: content} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return spec
}

// hello reads the fake guest's first line on the control channel and
// checks that the channel echoes.
func hello(t *testing.T, m vm.Machine) string {
	t.Helper()
	c := m.Control()
	line, err := bufio.NewReader(io.LimitReader(c, int64(len("hello boot=123456789012 restored=false disk=")+64))).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the guest's hello: %v (read %q)", err, line)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 5)
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "ping\n" {
		t.Fatalf("echo = %q, %v", echo, err)
	}
	return strings.TrimSuffix(line, "\n")
}

var helloLine = regexp.MustCompile(`^hello boot=([0-9a-f]{12}) restored=(true|false) disk=(.*)$`)

func parseHello(t *testing.T, line string) (boot string, restored bool, disk string) {
	t.Helper()
	m := helloLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("hello %q does not parse", line)
	}
	return m[1], m[2] == "true", m[3]
}

// consoleLog is a machine's console log once until holds of it, or as it
// is after 5s: the log is written a little after the machine writes its
// console (vmproc.Console writes the file from a goroutine of its own).
func consoleLog(t *testing.T, dir string, until func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(dir, consoleName))
		if err != nil {
			t.Fatal(err)
		}
		if until(string(data)) || time.Now().After(deadline) {
			return string(data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requests are the API requests the fake logged in a machine's console,
// once there are at least n.
func requests(t *testing.T, dir string, n int) []string {
	t.Helper()
	return parseRequests(consoleLog(t, dir, func(s string) bool { return len(parseRequests(s)) >= n }))
}

func parseRequests(console string) []string {
	var out []string
	for line := range strings.Lines(console) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "fake-api: "); ok && !strings.Contains(r, " -> ") {
			out = append(out, r)
		}
	}
	return out
}

func routes(reqs []string) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		f := strings.Fields(r)
		out[i] = f[0] + " " + f[1]
	}
	return out
}

func waitDone(t *testing.T, m vm.Machine) {
	t.Helper()
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the machine's Done was not closed")
	}
}

func TestBootSaveRestore(t *testing.T) {
	for _, jailed := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "jailer"}[jailed]
		t.Run(name, func(t *testing.T) {
			// The guest starts listening a while after boot: the VMM
			// must retry CONNECT until it does.
			fc, jailer := fakeBins(t, fakeConfig{ListenAfterMS: 300})
			opts := Options{Binary: fc}
			if jailed {
				if os.Geteuid() != 0 {
					testenv.Missing(t, "root", "the jailer (here a fake that drops to nobody) needs root")
				}
				opts.Jailer, opts.UID, opts.GID, opts.ChrootBase = jailer, 65534, 65534, t.TempDir()
			}
			v := New(opts)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()

			spec := machineFiles(t, "disk-of-the-original")
			m, err := v.Boot(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Kill()
			bootID, restored, disk := parseHello(t, hello(t, m))
			if restored || disk != "disk-of-the-original" {
				t.Fatalf("booted guest says restored=%t disk=%q", restored, disk)
			}
			want := []string{"PUT /boot-source", "PUT /machine-config", "PUT /drives/drive0", "PUT /vsock", "PUT /actions"}
			reqs := requests(t, spec.Dir, len(want))
			if got := routes(reqs); !slices.Equal(got, want) {
				t.Fatalf("requests %v, want %v", got, want)
			}
			for _, w := range []string{`"vcpu_count":2`, `"mem_size_mib":512`, `"is_root_device":true`, `"guest_cid":3`, `"uds_path":"v.sock"`, `"action_type":"InstanceStart"`} {
				if !strings.Contains(strings.Join(reqs, "\n"), w) {
					t.Errorf("no request carries %s: %q", w, reqs)
				}
			}
			bootLine := regexp.MustCompile(`fake guest: booting [0-9a-f]+ with command line: loglevel=4 evalsi.control=vsock:1024 console=ttyS0 `)
			console := consoleLog(t, spec.Dir, bootLine.MatchString)
			if !bootLine.MatchString(console) {
				t.Errorf("the console log has no guest boot line with the control channel:\n%s", console)
			}
			if jailed {
				if !strings.Contains(console, "--uid 65534 --gid 65534 --chroot-base-dir "+opts.ChrootBase+" -- --api-sock /fc.sock") {
					t.Errorf("the jailer's arguments are not in the console log:\n%s", console)
				}
				var st syscall.Stat_t
				if err := syscall.Stat(spec.Disks[0].Path, &st); err != nil || st.Uid != 65534 {
					t.Errorf("the writable disk is owned by %d (%v), want the jail's user 65534", st.Uid, err)
				}
			}

			snap := t.TempDir()
			if err := v.Save(ctx, m, snap); err != nil {
				t.Fatal(err)
			}
			waitDone(t, m)
			if err := m.Err(); err == nil || !strings.Contains(err.Error(), "stopped by Kill") {
				t.Errorf("Err after Save = %v, want it stopped by Kill", err)
			}
			if got := routes(requests(t, spec.Dir, len(want)+2))[len(want):]; !slices.Equal(got, []string{"PATCH /vm", "PUT /snapshot/create"}) {
				t.Errorf("Save's requests %v", got)
			}
			for _, f := range []string{vmstateName, memoryName, snapMetaName} {
				if _, err := os.Stat(filepath.Join(snap, f)); err != nil {
					t.Errorf("Save left no %s: %v", f, err)
				}
			}
			if jailed {
				assertNoJails(t, opts.ChrootBase)
			}

			// Two copies from the same snapshot, each on its own disk.
			for _, content := range []string{"disk-of-copy-one", "disk-of-copy-two"} {
				cs := machineFiles(t, content)
				c, err := v.Restore(ctx, vm.BootSpec{Dir: cs.Dir, Disks: cs.Disks}, snap)
				if err != nil {
					t.Fatal(err)
				}
				gotBoot, restored, disk := parseHello(t, hello(t, c))
				if gotBoot != bootID || !restored || disk != content {
					t.Errorf("copy says boot=%s restored=%t disk=%q, want boot=%s restored=true disk=%q", gotBoot, restored, disk, bootID, content)
				}
				if got := routes(requests(t, cs.Dir, 1)); !slices.Equal(got, []string{"PUT /snapshot/load"}) {
					t.Errorf("Restore's requests %v", got)
				}
				if err := c.Kill(); err != nil {
					t.Errorf("Kill: %v", err)
				}
				waitDone(t, c)
				if err := c.Kill(); err != nil {
					t.Errorf("a second Kill: %v", err)
				}
			}
			if jailed {
				assertNoJails(t, opts.ChrootBase)
			}
		})
	}
}

// assertNoJails checks that Kill removed every jail under base.
func assertNoJails(t *testing.T, base string) {
	t.Helper()
	jails, _ := filepath.Glob(filepath.Join(base, "*", "*"))
	if len(jails) > 0 {
		t.Errorf("jails left after Kill: %v", jails)
	}
}

// Firecracker's fault_message reaches the caller, and the failed boot's
// process is stopped.
func TestAPIErrorCarriesFaultMessage(t *testing.T) {
	const msg = "Invalid Memory Configuration: MmapRegion(Mmap(Os { code: 12, kind: OutOfMemory }))"
	fc, _ := fakeBins(t, fakeConfig{Faults: map[string]string{"PUT /machine-config": msg}})
	spec := machineFiles(t, "disk")
	_, err := New(Options{Binary: fc}).Boot(t.Context(), spec)
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("Boot error %v is not an *APIError", err)
	}
	if apiErr.FaultMessage != msg || apiErr.Status != 400 || apiErr.Path != "/machine-config" {
		t.Errorf("APIError = %+v", apiErr)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("error %q does not carry the fault message", err)
	}
}

func TestBootFailures(t *testing.T) {
	cases := []struct {
		name  string
		cfg   fakeConfig
		spec  func(*vm.BootSpec)
		ctx   time.Duration
		wants []string
	}{
		{
			name:  "qcow2 refused before anything starts",
			spec:  func(s *vm.BootSpec) { s.Disks[0].Format = "qcow2" },
			wants: []string{"qcow2", "raw images only", "qemu-img convert -O raw"},
		},
		{
			name:  "too many vCPUs",
			spec:  func(s *vm.BootSpec) { s.VCPUs = 64 },
			wants: []string{"64 vCPUs", "1 to 32"},
		},
		{
			name:  "missing disk",
			spec:  func(s *vm.BootSpec) { s.Disks[0].Path += ".missing" },
			wants: []string{"disk 0", "no such file"},
		},
		{
			name:  "Firecracker dies",
			cfg:   fakeConfig{Crash: "PUT /boot-source"},
			wants: []string{"exited: exit status 1", "fake firecracker: crashing on PUT /boot-source"},
		},
		{
			name:  "guest never listens",
			cfg:   fakeConfig{NeverListen: true},
			ctx:   700 * time.Millisecond,
			wants: []string{"did not accept the control channel on vsock port 1024", "nothing listens"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fc, _ := fakeBins(t, c.cfg)
			spec := machineFiles(t, "disk")
			if c.spec != nil {
				c.spec(&spec)
			}
			ctx := t.Context()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			m, err := New(Options{Binary: fc}).Boot(ctx, spec)
			if err == nil {
				m.Kill()
				t.Fatal("Boot succeeded")
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestRestoreChecksTheSnapshot(t *testing.T) {
	fc, _ := fakeBins(t, fakeConfig{})
	v := New(Options{Binary: fc})
	spec := machineFiles(t, "disk")
	m, err := v.Boot(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	snap := t.TempDir()
	if err := v.Save(t.Context(), m, snap); err != nil {
		t.Fatal(err)
	}
	cs := machineFiles(t, "copy")
	two := append(cs.Disks, cs.Disks[0])
	cases := []struct {
		name  string
		spec  vm.BootSpec
		dir   string
		wants string
	}{
		{"no snapshot", vm.BootSpec{Dir: cs.Dir, Disks: cs.Disks}, t.TempDir(), "was "},
		{"another drive count", vm.BootSpec{Dir: cs.Dir, Disks: two}, snap, "has 1 drives, the spec 2"},
		{"read-only differs", vm.BootSpec{Dir: cs.Dir, Disks: []vm.Disk{{Path: cs.Disks[0].Path, ReadOnly: true}}}, snap, "read-only true"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := v.Restore(t.Context(), c.spec, c.dir)
			if err == nil {
				m.Kill()
				t.Fatal("Restore succeeded")
			}
			if !strings.Contains(err.Error(), c.wants) {
				t.Errorf("error %q does not say %q", err, c.wants)
			}
		})
	}
}

func TestJailerArgs(t *testing.T) {
	w := &workdir{id: "evalsi-0123456789abcdef", execFile: "/usr/bin/firecracker", chrootBase: "/srv/jailer", uid: 123, gid: 100}
	want := []string{"--id", "evalsi-0123456789abcdef", "--exec-file", "/usr/bin/firecracker", "--uid", "123", "--gid", "100",
		"--chroot-base-dir", "/srv/jailer", "--", "--api-sock", "/fc.sock"}
	if got := w.jailerArgs(); !slices.Equal(got, want) {
		t.Errorf("jailer args\n got %q\nwant %q", got, want)
	}
	id, err := jailID()
	if err != nil || !jailIDPattern.MatchString(id) {
		t.Errorf("jail id %q (%v) is not a valid jailer --id", id, err)
	}
}

func TestJailerConfigRefusesRoot(t *testing.T) {
	err := New(Options{Jailer: "jailer", UID: 0, GID: 0}).checkJailerConfig()
	if err == nil || !strings.Contains(err.Error(), "root is refused") {
		t.Errorf("checkJailerConfig with uid 0 = %v", err)
	}
}

func TestBootArgs(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "evalsi.control=vsock:1024 console=ttyS0 reboot=k pci=off panic=1"},
		{"loglevel=4  panic=-1", "loglevel=4 panic=-1 evalsi.control=vsock:1024 console=ttyS0 reboot=k pci=off"},
	}
	for _, c := range cases {
		if got := bootArgs(c.in); got != c.want {
			t.Errorf("bootArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	fc, _ := fakeBins(t, fakeConfig{})
	notFC := filepath.Join(t.TempDir(), "firecracker")
	if err := os.WriteFile(notFC, []byte("#!/bin/sh\necho 'some other firecracker 0.1'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		opts   Options
		wants  []string
		avoids []string
	}{
		{
			name:  "nothing there",
			opts:  Options{Binary: "evalsi-no-such-firecracker", KVM: filepath.Join(t.TempDir(), "kvm")},
			wants: []string{"evalsi-no-such-firecracker not found", "does not open read-write"},
		},
		{
			name:   "another program",
			opts:   Options{Binary: notFC, KVM: "/dev/null"},
			wants:  []string{"not the expected program", "KVM_GET_API_VERSION failed"},
			avoids: []string{"not found"},
		},
		{
			name:   "Firecracker without KVM",
			opts:   Options{Binary: fc, KVM: "/dev/null"},
			wants:  []string{"/dev/null: KVM_GET_API_VERSION failed"},
			avoids: []string{"--version", "not found"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := New(c.opts).Check(t.Context())
			if err == nil {
				t.Fatal("Check passed")
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, a := range c.avoids {
				if strings.Contains(err.Error(), a) {
					t.Errorf("error %q says %q", err, a)
				}
			}
		})
	}
	if v, err := New(Options{Binary: fc}).version(t.Context(), fc, "Firecracker v"); err != nil || v != "Firecracker v1.17.0-fake" {
		t.Errorf("version = %q, %v", v, err)
	}
}

func TestSaveRefusesAnotherMachine(t *testing.T) {
	err := New(Options{}).Save(t.Context(), otherMachine{}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "did not boot") {
		t.Errorf("Save of another VMM's machine = %v", err)
	}
}

type otherMachine struct{ vm.Machine }

// A snapshot Firecracker refuses leaves the machine running: Save resumes
// it and says why.
func TestSaveFailureResumes(t *testing.T) {
	const msg = "Cannot create snapshot: No space left on device (os error 28)"
	fc, _ := fakeBins(t, fakeConfig{Faults: map[string]string{"PUT /snapshot/create": msg}})
	v := New(Options{Binary: fc})
	spec := machineFiles(t, "disk")
	m, err := v.Boot(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	hello(t, m)
	err = v.Save(t.Context(), m, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Fatalf("Save = %v, want the fault %q", err, msg)
	}
	select {
	case <-m.Done():
		t.Fatalf("the machine stopped: %v", m.Err())
	default:
	}
	// Boot's five, the pause, the refused snapshot and the resume.
	reqs := requests(t, spec.Dir, 8)
	if last := reqs[len(reqs)-1]; last != `PATCH /vm {"state":"Resumed"}` {
		t.Errorf("last request %q, want the resume", last)
	}
	if _, err := io.WriteString(m.Control(), "still\n"); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 6)
	if _, err := io.ReadFull(m.Control(), echo); err != nil || string(echo) != "still\n" {
		t.Errorf("after the failed Save the channel echoes %q, %v", echo, err)
	}
}

// A guest flooding its serial console with 50 MB leaves a console.log of
// at most 130 KiB, with the console's start, a marker counting what was
// dropped and the console's end, and the machine answers its API and its
// control channel throughout: the fake's API handlers log to the same
// stdout, so a console that pushed back would stall them.
func TestConsoleFlood(t *testing.T) {
	const flood = 50 << 20
	fc, _ := fakeBins(t, fakeConfig{FloodBytes: flood, FloodMS: 2000})
	spec := machineFiles(t, "disk")
	m, err := New(Options{Binary: fc}).Boot(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	hello(t, m)
	fm := m.(*machine)
	c := m.Control().(net.Conn)
	during, slowest := 0, time.Duration(0)
	for start := time.Now(); !strings.Contains(fm.con.Tail(500), "fake guest: flood ends"); during++ {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the flood did not end in 30s (%d bytes dropped so far)", fm.con.Dropped())
		}
		t0 := time.Now()
		msg := fmt.Sprintf("echo %d during the flood\n", during)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(msg))
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
			t.Fatalf("echo during the flood = %q, %v", got, err)
		}
		if err := fm.api.call(t.Context(), "PATCH", "/vm", vmState{State: "Resumed"}); err != nil {
			t.Fatalf("an API request during the flood: %v", err)
		}
		slowest = max(slowest, time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d echoes and API requests during the flood, the slowest %s", during, slowest)
	if during < 3 || slowest > time.Second {
		t.Errorf("%d echoes and API requests during the 2s flood, the slowest taking %s: want at least 3, each under 1s", during, slowest)
	}

	console := consoleLog(t, spec.Dir, func(s string) bool { return strings.Contains(s[max(len(s)-1000, 0):], "fake guest: flood ends") })
	if len(console) > 130<<10 {
		t.Fatalf("console.log is %d bytes, over 130 KiB", len(console))
	}
	head, rest, ok := strings.Cut(console, "\n[evalsi: ")
	if !ok {
		t.Fatalf("console.log (%d bytes) has no marker of dropped output; it ends %q", len(console), tail(console, 300))
	}
	if !strings.HasPrefix(head, "fake firecracker: serving the API on ") || !strings.Contains(head, "fake guest: flood begins\nfake guest: flood line 0,") {
		t.Errorf("console.log does not start with the console's start: %q…", head[:min(len(head), 300)])
	}
	dropped := fm.con.Dropped()
	if want := fmt.Sprintf("%d bytes of console output dropped here", dropped); dropped < flood-(130<<10) || !strings.HasPrefix(rest, want) {
		t.Errorf("the marker says %q, want %q for a flood of %d bytes", rest[:min(len(rest), 100)], want, flood)
	}
	if !strings.Contains(tail(console, 1000), "fake guest: flood ends\n") {
		t.Errorf("console.log does not end with the console's end: %q", tail(console, 300))
	}
	m.Kill()
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "fake guest: flood ends") {
		t.Errorf("Err after the flood = %v, want the console's end", err)
	}
}

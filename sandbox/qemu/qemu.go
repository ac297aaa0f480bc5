// Package qemu is the VMM of the qemu rung: qemu-system-x86_64's microvm
// machine (virtio-mmio devices, no PCI, no firmware to speak of), under KVM
// when it works and under TCG, QEMU's software emulation, otherwise. The
// guest's control channel is a virtio-serial port whose chardev is one end
// of a unix socket pair the host holds the other end of; QMP, QEMU's
// monitor protocol, pauses, saves and restores machines over another.
//
// When the engine is root, QEMU runs as an unprivileged id of its own
// (DefaultID) from its first instruction, inside its own seccomp sandbox,
// and gets every file as a descriptor: the sockets, sealed memfd copies of
// the kernel and initramfs (bootfd.go), and each file of each disk's
// backing chain, read from the qcow2 headers by the engine (chain.go). So
// a guest that breaks QEMU's device emulation holds an id that owns no
// file and can open none of the engine's. See sandbox/vm for what a VMM
// is.
package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"evals.si/sandbox/vm"
	"evals.si/sandbox/vm/vmproc"
)

// Name is the rung's name.
const Name = "qemu"

// controlPort is the virtio-serial port's name, which the guest finds in
// /sys/class/virtio-ports/*/name.
const controlPort = "evalsi.0"

// installHint says how to get a QEMU that has the microvm machine.
const installHint = "install it (apt-get install qemu-system-x86)"

// Options configure a VMM.
type Options struct {
	// Binary is QEMU; default qemu-system-x86_64 on PATH.
	Binary string
	// Accel is "kvm", "tcg" or "auto" (the default). "auto" is TCG
	// unless EVALSI_QEMU_KVM=1 was set when New ran and KVM runs a probe
	// guest: a KVM that opens, and even runs a few real-mode
	// instructions, can still hang a Linux guest at boot (nested
	// virtualisation on test machines does), and only booting a real
	// guest would tell, which costs seconds and a timeout. So KVM is
	// something an operator turns on, not something guessed.
	Accel string
	// Logger gets one record per boot, save and restore, with durations;
	// default slog.Default().
	Logger *slog.Logger
	// UID and GID are who QEMU runs as when the engine is root (0:
	// DefaultID, the default; root cannot be asked for). When the engine
	// is not root QEMU runs as the engine's user, and ids other than its
	// own are an error.
	UID, GID int
}

// VMM boots QEMU microvm machines. It implements vm.VMM and
// vm.Snapshotter.
type VMM struct {
	binary   string
	accel    string
	kvmOptIn bool
	log      *slog.Logger
	uid, gid int
	// idDir holds the leases of the machines' own ids (ids.go).
	idDir string
	boot  bootFiles // sealed copies of kernels and initramfses

	mu       sync.Mutex
	resolved string // the accelerator "auto" resolved to, once known
	tsc      int    // the host's TSC rate in kHz, once read (-1: unknown)
}

var (
	_ vm.VMM         = (*VMM)(nil)
	_ vm.Snapshotter = (*VMM)(nil)
)

// New returns a VMM with opts.
func New(opts Options) *VMM {
	v := &VMM{binary: opts.Binary, accel: opts.Accel, log: opts.Logger, uid: opts.UID, gid: opts.GID, idDir: idLockDir}
	if v.binary == "" {
		v.binary = "qemu-system-x86_64"
	}
	if v.accel == "" {
		v.accel = "auto"
	}
	if v.log == nil {
		v.log = slog.Default()
	}
	v.kvmOptIn = os.Getenv("EVALSI_QEMU_KVM") == "1"
	return v
}

func (v *VMM) Name() string { return Name }

// Check says whether QEMU can run machines here: its binary runs, knows
// the microvm machine and QEMU's seccomp sandbox, and the accelerator
// works. It boots nothing but a probe of KVM when KVM is asked for.
func (v *VMM) Check(ctx context.Context) error {
	bin, err := exec.LookPath(v.binary)
	if err != nil {
		return fmt.Errorf("qemu rung: %s not found: %s", v.binary, installHint)
	}
	out, err := v.output(ctx, bin, "-M", "help")
	if err != nil {
		return fmt.Errorf("qemu rung: %s -M help: %w", bin, err)
	}
	if !hasWord(out, "microvm") {
		return fmt.Errorf("qemu rung: %s has no microvm machine (-M help does not list it): %s", bin, installHint)
	}
	out, err = v.output(ctx, bin, "-help")
	if err != nil {
		return fmt.Errorf("qemu rung: %s -help: %w", bin, err)
	}
	if !strings.Contains(out, "-sandbox") {
		return fmt.Errorf("qemu rung: %s was built without seccomp (-help lists no -sandbox), and the rung runs QEMU in its own seccomp sandbox: %s", bin, installHint)
	}
	accel, err := v.resolveAccel(ctx)
	if err != nil {
		return err
	}
	cred, err := v.credential(accel)
	if err != nil {
		return fmt.Errorf("qemu rung: running QEMU as its own user: %w", err)
	}
	v.log.DebugContext(ctx, "qemu: check passed", "binary", bin, "accel", accel, "runs_as", credString(cred))
	return nil
}

// credString says who a credential runs QEMU as, for logs.
func credString(c *syscall.Credential) string {
	if c == nil {
		return "the engine's user"
	}
	return fmt.Sprintf("%d:%d groups %v", c.Uid, c.Gid, c.Groups)
}

// Accel returns the accelerator machines will use ("kvm" or "tcg"),
// probing KVM the first time when it is asked for.
func (v *VMM) Accel(ctx context.Context) (string, error) { return v.resolveAccel(ctx) }

func (v *VMM) output(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%w: %s", err, tailString(out.String(), 512))
	}
	return out.String(), nil
}

func hasWord(text, word string) bool {
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == word {
			return true
		}
	}
	return false
}

func (v *VMM) resolveAccel(ctx context.Context) (string, error) {
	switch v.accel {
	case "tcg":
		return "tcg", nil
	case "kvm", "auto":
	default:
		return "", fmt.Errorf("qemu rung: accelerator %q: want kvm, tcg or auto", v.accel)
	}
	if v.accel == "auto" && !v.kvmOptIn {
		return "tcg", nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.resolved != "" {
		return v.resolved, nil
	}
	err := v.probeKVM(ctx)
	switch {
	case err == nil:
		v.resolved = "kvm"
	case ctx.Err() != nil:
		return "", err
	case v.accel == "kvm":
		return "", fmt.Errorf("qemu rung: accelerator kvm: %w", err)
	default:
		v.log.WarnContext(ctx, "qemu: EVALSI_QEMU_KVM=1 but KVM does not work here; machines use TCG", "err", err)
		v.resolved = "tcg"
	}
	return v.resolved, nil
}

// probeKVM runs a KVM guest of a few instructions (probeGuest), as the
// user machines run as. It proves /dev/kvm is usable by that user and KVM
// runs code; it cannot prove a Linux guest boots (see Options.Accel).
func (v *VMM) probeKVM(ctx context.Context) error {
	f, err := os.OpenFile(kvmDevice, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%s is not usable (%w): load the kvm module and give the engine access to %s, or use accelerator tcg", kvmDevice, err, kvmDevice)
	}
	f.Close()
	return v.probeGuest(ctx, "kvm")
}

// probeGuest runs a 64 KiB firmware on accel whose reset vector writes 1
// to an isa-debug-exit port, which makes QEMU exit with status 3. The
// firmware is a sealed memfd, as machines' kernels are, so the probe's
// QEMU runs as theirs does: as its own user, opening no file of the
// engine's.
func (v *VMM) probeGuest(ctx context.Context, accel string) error {
	cred, err := v.credential(accel)
	if err != nil {
		return err
	}
	bios := make([]byte, 64<<10)
	// At F000:FFF0: mov al,1; out 0xf4,al; hlt; jmp $.
	copy(bios[0xfff0:], []byte{0xb0, 0x01, 0xe6, 0xf4, 0xf4, 0xeb, 0xfe})
	fw, err := sealedCopy(bytes.NewReader(bios), int64(len(bios)), "probe.bin")
	if err != nil {
		return fmt.Errorf("%s probe: %w", accel, err)
	}
	defer fw.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, v.binary, "-M", "microvm", "-accel", accel, "-nodefaults", "-no-user-config",
		"-display", "none", "-m", "16", "-bios", "/proc/self/fd/3",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=4")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{fw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s probe guest did not finish in 10s (%s hangs here): %s", accel, accel, tailString(out.String(), 512))
	}
	return fmt.Errorf("%s probe guest (qemu as %s): %v: %s", accel, credString(cred), err, tailString(out.String(), 512))
}

// tscKHz returns the host's TSC rate in kHz from /proc/cpuinfo, or 0
// when it is unknown: the "cpu MHz" of a CPU whose TSC runs at a constant
// rate (constant_tsc), which is then its nominal rate.
func (v *VMM) tscKHz(ctx context.Context) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tsc == 0 {
		v.tsc = -1
		b, err := os.ReadFile("/proc/cpuinfo")
		if khz, ok := parseTSC(string(b)); err == nil && ok {
			v.tsc = khz
		} else {
			v.log.WarnContext(ctx, "qemu: the host's TSC rate is unknown (no constant_tsc and cpu MHz in /proc/cpuinfo); TCG guests calibrate it and may hang at boot on a busy host", "err", err)
		}
	}
	return max(v.tsc, 0)
}

func parseTSC(cpuinfo string) (int, bool) {
	var mhz float64
	constant := false
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "cpu MHz":
			if mhz == 0 {
				mhz, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
			}
		case "flags":
			constant = constant || slices.Contains(strings.Fields(val), "constant_tsc")
		}
	}
	if mhz <= 0 || !constant {
		return 0, false
	}
	return int(mhz * 1000), true
}

// Boot starts a machine and returns once QEMU has connected its control
// chardev and its monitor answers.
func (v *VMM) Boot(ctx context.Context, spec vm.BootSpec) (vm.Machine, error) {
	spec = withDefaults(spec)
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	accel, err := v.resolveAccel(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m, err := v.start(ctx, spec, accel, false)
	if err != nil {
		return nil, err
	}
	v.log.InfoContext(ctx, "qemu: booted", "dir", spec.Dir, "accel", accel, "pid", m.cmd.Process.Pid, "took", time.Since(start))
	return m, nil
}

func withDefaults(spec vm.BootSpec) vm.BootSpec {
	if spec.VCPUs <= 0 {
		spec.VCPUs = 1
	}
	if spec.MemoryMB <= 0 {
		spec.MemoryMB = 256
	}
	for i := range spec.Disks {
		if spec.Disks[i].Format == "" {
			spec.Disks[i].Format = "raw"
		}
	}
	return spec
}

func checkSpec(spec vm.BootSpec) error {
	if spec.Kernel == "" {
		return errors.New("qemu rung: the boot spec names no kernel")
	}
	if spec.Dir == "" {
		return errors.New("qemu rung: the boot spec names no machine directory")
	}
	if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("qemu rung: machine directory %s: must exist (%v)", spec.Dir, err)
	}
	for i, d := range spec.Disks {
		if d.Format != "raw" && d.Format != "qcow2" {
			return fmt.Errorf("qemu rung: disk %d (%s): format %q: want raw or qcow2", i, d.Path, d.Format)
		}
	}
	return nil
}

// fds is what a QEMU process gets as descriptors (its ExtraFiles), by
// their numbers in it: it opens nothing of the engine's by path.
type fds struct {
	// control and qmp are QEMU's ends of the control channel's and the
	// monitor's socket pairs.
	control, qmp int
	// kernel and initrd are sealed memfd copies (initrd 0: none).
	kernel, initrd int
	// disks are spec.Disks' chains, top first.
	disks [][]diskFD
}

// diskFD is one file of a disk's chain: descriptor fd in fd set set.
type diskFD struct {
	fd, set  int
	format   string
	readOnly bool
	path     string // for QEMU's fd set listing and errors
}

// args is QEMU's command line for spec, with the files in f. A restored
// machine must get the same devices in the same order as the one saved:
// the migration stream names devices by their place.
func args(spec vm.BootSpec, accel string, tscKHz int, incoming bool, f fds) []string {
	cmdline := strings.TrimSpace(spec.Cmdline + " console=ttyS0 panic=-1 evalsi.control=virtio-serial:" + controlPort)
	if accel == "tcg" && tscKHz > 0 {
		// The guest's TSC under TCG is the host's. The kernel measures
		// its rate against the PIT, which under emulation on a busy host
		// fails ("Unable to calibrate against PIT"); with no other
		// reference it then marks the TSC unstable and hangs. Telling it
		// the rate skips the measurement.
		cmdline += " tsc_early_khz=" + strconv.Itoa(tscKHz)
	}
	a := []string{
		// The machine's directory names the process in ps: QEMU itself
		// is given no path of it.
		"-name", "guest=" + optEscape("evalsi "+spec.Dir),
		"-M", "microvm,isa-serial=on",
		"-accel", accel,
		"-m", strconv.Itoa(spec.MemoryMB),
		"-smp", strconv.Itoa(spec.VCPUs),
		// No default devices (which include a NIC, a monitor and
		// drives) and no config files: the machine has exactly what is
		// listed here.
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", procFD(f.kernel),
		"-append", cmdline,
		// The serial console goes to QEMU's stdout, a pipe the rung
		// reads into a bounded log (vmproc.Console): a file chardev
		// would let the guest grow a host file without bound, and the
		// rung drains the pipe at once, so QEMU never waits on it.
		// QEMU's own messages go to stderr (qemu.log).
		"-serial", "stdio",
		"-device", "virtio-serial-device",
		// A socket connected before QEMU starts, so the connection
		// exists before the guest opens the port (a server chardev
		// raced the guest and lost its first bytes), and QEMU reaches
		// no socket by path.
		"-chardev", "socket,id=c0,fd=" + strconv.Itoa(f.control),
		"-device", "virtserialport,chardev=c0,name=" + controlPort,
	}
	if accel == "kvm" {
		a = append(a, "-cpu", "host")
	}
	if f.initrd != 0 {
		a = append(a, "-initrd", procFD(f.initrd))
	}
	for i, chain := range f.disks {
		// The chain's nodes from its base up, each qcow2 given its
		// backing node by name (or none), so QEMU opens no path its
		// headers name.
		for j := len(chain) - 1; j >= 0; j-- {
			c := chain[j]
			a = append(a, "-add-fd", fmt.Sprintf("fd=%d,set=%d,opaque=%s", c.fd, c.set, optEscape(c.path)))
			file := fmt.Sprintf("d%d-f%d", i, j)
			a = append(a, "-blockdev", blockdevJSON(map[string]any{
				"driver": "file", "node-name": file, "filename": "/dev/fdset/" + strconv.Itoa(c.set), "read-only": c.readOnly,
			}))
			node := map[string]any{"driver": c.format, "node-name": nodeName(i, j), "file": file, "read-only": c.readOnly}
			if c.format == "qcow2" {
				node["backing"] = nil
				if j+1 < len(chain) {
					node["backing"] = nodeName(i, j+1)
				}
			}
			a = append(a, "-blockdev", blockdevJSON(node))
		}
		// write-cache=on: what -drive's default cache=writeback gave the
		// guest (a cache it flushes), rather than a flush per write.
		a = append(a, "-device", fmt.Sprintf("virtio-blk-device,drive=%s,write-cache=on", nodeName(i, 0)))
	}
	a = append(a,
		"-object", "rng-random,filename=/dev/urandom,id=rng0",
		"-device", "virtio-rng-device,rng=rng0",
		"-chardev", "socket,id=qmp0,fd="+strconv.Itoa(f.qmp),
		"-mon", "chardev=qmp0,mode=control",
		// QEMU's own seccomp filter: no obsolete syscalls, no setuid,
		// no fork or exec (so a guest that escapes into QEMU cannot
		// start programs: migration goes to descriptors, never exec:),
		// no scheduler or affinity changes.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	)
	if incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// nodeName is the block node of disk i's chain file j (0: the top, which
// the device uses).
func nodeName(i, j int) string {
	if j == 0 {
		return fmt.Sprintf("d%d", i)
	}
	return fmt.Sprintf("d%d-b%d", i, j)
}

// blockdevJSON is a -blockdev in JSON, the form that can say "no
// backing" (null) and needs no escaping of names.
func blockdevJSON(node map[string]any) string {
	b, _ := json.Marshal(node)
	return string(b)
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// optEscape escapes a value in QEMU's key=value,key=value options, where
// a comma is written twice.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// socketPair returns the two ends of a unix stream socket pair: the
// engine's, and QEMU's to inherit.
func socketPair(name string) (*net.UnixConn, *os.File, error) {
	p, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s socket pair: %w", name, err)
	}
	host := os.NewFile(uintptr(p[0]), name)
	defer host.Close()
	c, err := net.FileConn(host)
	if err != nil {
		syscall.Close(p[1])
		return nil, nil, fmt.Errorf("%s socket pair: %w", name, err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(p[1]), name), nil
}

// start runs QEMU for spec and connects its control channel and monitor.
func (v *VMM) start(ctx context.Context, spec vm.BootSpec, accel string, incoming bool) (_ *machine, err error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("qemu rung: starting a machine: %w", err)
	}
	cred, err := v.credential(accel)
	if err != nil {
		return nil, fmt.Errorf("qemu rung: running QEMU as its own user: %w", err)
	}
	// The default ids: one of its own per machine (ids.go).
	var lease *idLease
	if cred != nil && v.uid == 0 && v.gid == 0 {
		if lease, err = leaseID(v.idDir); err != nil {
			return nil, fmt.Errorf("qemu rung: %w", err)
		}
		cred.Uid, cred.Gid = uint32(lease.id), uint32(lease.id)
		defer func() {
			if err != nil {
				lease.release()
			}
		}()
	}
	// files are QEMU's descriptors, fd 3 onwards: the engine's copies
	// are closed once QEMU has them (or has failed to start).
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	add := func(f *os.File) int {
		files = append(files, f)
		return 2 + len(files)
	}
	var fd fds
	ctl, ctlQEMU, err := socketPair("control")
	if err != nil {
		return nil, fmt.Errorf("qemu rung: %w", err)
	}
	fd.control = add(ctlQEMU)
	mon, monQEMU, err := socketPair("qmp")
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("qemu rung: %w", err)
	}
	fd.qmp = add(monQEMU)
	defer func() {
		if err != nil {
			ctl.Close()
			mon.Close()
		}
	}()
	k, err := v.boot.open(spec.Kernel)
	if err != nil {
		return nil, fmt.Errorf("qemu rung: kernel: %w", err)
	}
	fd.kernel = add(k)
	if spec.Initrd != "" {
		f, err := v.boot.open(spec.Initrd)
		if err != nil {
			return nil, fmt.Errorf("qemu rung: initramfs: %w", err)
		}
		fd.initrd = add(f)
	}
	set := 0
	for i, d := range spec.Disks {
		chain, err := openChain(d.Path, d.Format, d.ReadOnly)
		if err != nil {
			return nil, fmt.Errorf("qemu rung: disk %d: %w", i, err)
		}
		var nodes []diskFD
		for _, c := range chain {
			set++
			nodes = append(nodes, diskFD{fd: add(c.f), set: set, format: c.format, readOnly: !c.writable, path: c.path})
		}
		fd.disks = append(fd.disks, nodes)
	}

	logPath := filepath.Join(spec.Dir, "qemu.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("qemu rung: %w", err)
	}
	defer logf.Close()
	con, err := vmproc.OpenConsole(filepath.Join(spec.Dir, "console.log"), v.log)
	if err != nil {
		return nil, fmt.Errorf("qemu rung: %w", err)
	}
	// Not CommandContext: ctx bounds the start, the machine runs until
	// Kill.
	cmd := exec.Command(v.binary, args(spec, accel, v.tscKHz(ctx), incoming, fd)...)
	// The root: QEMU's user may reach no directory of the engine's.
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.ExtraFiles = files
	// stdout is the guest's serial console; QEMU's own messages are on
	// stderr.
	cmd.Stdout, cmd.Stderr = con, logf
	// Wait returns once QEMU has exited and its stdout is drained; a
	// descriptor of the pipe left elsewhere (QEMU starts nothing: its
	// seccomp filter forbids it) cannot hold it longer than this.
	cmd.WaitDelay = time.Second
	// Its own process group, so Kill reaches anything QEMU might start;
	// vmproc.Start adds the death signal that kills it with the engine
	// (Go sets it after the change of user, which would clear it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	waited, err := vmproc.Start(cmd)
	if err != nil {
		con.Close()
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("qemu rung: %s not found: %s", v.binary, installHint)
		}
		return nil, fmt.Errorf("qemu rung: starting %s as %s: %w", v.binary, credString(cred), err)
	}
	// QEMU has its copies: without the engine's, its exit ends the
	// sockets (EOF), which the monitor's greeting waits on.
	for _, f := range files {
		f.Close()
	}
	files = nil
	m := &machine{
		cmd: cmd, spec: spec, accel: accel, done: make(chan struct{}),
		con: con, qemuLog: logPath, log: v.log, ctl: ctl, lease: lease,
	}
	m.qmp = newQMP(mon)
	go m.wait(waited)
	if err := m.qmp.start(ctx); err != nil {
		m.Kill()
		return nil, fmt.Errorf("qemu rung: connecting its monitor: %w (%v)", err, m.Err())
	}
	return m, nil
}

// machine is a running QEMU.
type machine struct {
	cmd     *exec.Cmd
	spec    vm.BootSpec
	accel   string
	ctl     *net.UnixConn
	qmp     *qmp
	con     *vmproc.Console
	qemuLog string
	log     *slog.Logger

	killOnce sync.Once
	killed   atomic.Bool
	saved    atomic.Bool

	// lease is the machine's own id, held until QEMU is reaped.
	lease *idLease

	done chan struct{}
	err  error // set before done is closed
}

func (m *machine) Control() io.ReadWriteCloser { return m.ctl }
func (m *machine) Done() <-chan struct{}       { return m.done }

// Err is nil while QEMU runs, then an *ExitError.
func (m *machine) Err() error {
	select {
	case <-m.done:
		return m.err
	default:
		return nil
	}
}

func (m *machine) wait(waited <-chan error) {
	err := <-waited
	if cerr := m.con.Close(); cerr != nil {
		m.log.Warn("qemu: the guest's console log is incomplete", "dir", m.spec.Dir, "err", cerr)
	}
	state := "exited with status 0"
	if err != nil {
		state = err.Error()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			state = ee.ProcessState.String()
		}
	}
	m.err = &ExitError{
		PID:     m.cmd.Process.Pid,
		State:   state,
		Killed:  m.killed.Load() && strings.Contains(state, "killed"),
		Saved:   m.saved.Load(),
		QEMU:    tailFile(m.qemuLog, 10),
		Console: tailLines(m.con.Tail(4<<10), 15),
	}
	if m.qmp != nil {
		m.qmp.Close()
	}
	m.lease.release()
	close(m.done)
}

// Kill stops QEMU at once (SIGKILL to its process group) and waits for it
// to be reaped.
func (m *machine) Kill() error {
	m.killOnce.Do(func() {
		select {
		case <-m.done:
		default:
			m.killed.Store(true)
			syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	<-m.done
	if m.ctl != nil {
		m.ctl.Close()
	}
	return nil
}

// ExitError is how a machine's QEMU ended.
type ExitError struct {
	PID int
	// State is the process's end, as "exit status 1" or "signal: killed".
	State string
	// Killed: by Kill. Saved: it quit after Save wrote its state.
	Killed, Saved bool
	// QEMU is the tail of QEMU's own messages (qemu.log), Console the
	// tail of the guest's serial console (what console.log ends with,
	// from memory, so that it is there when the disk is full).
	QEMU, Console string
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "qemu (pid %d) %s", e.PID, e.State)
	switch {
	case e.Killed:
		b.WriteString(", killed by the rung")
	case e.Saved:
		b.WriteString(", after saving its state")
	}
	if e.QEMU != "" {
		fmt.Fprintf(&b, "; qemu said: %s", e.QEMU)
	}
	if e.Console != "" {
		fmt.Fprintf(&b, "; console tail:\n%s", e.Console)
	} else {
		b.WriteString("; the guest's console is empty")
	}
	return b.String()
}

// tailFile returns the last lines of a file (at most its last 4 KiB).
func tailFile(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 4 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return tailLines(string(b), lines)
}

// tailLines returns the last lines of text.
func tailLines(text string, lines int) string {
	text = strings.TrimRight(strings.ReplaceAll(text, "\r", ""), "\n")
	ls := strings.Split(text, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.TrimSpace(strings.Join(ls, "\n"))
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// snapshotMeta is what Save records beside the state, so Restore can
// refuse a spec the state does not fit with a clear error instead of
// QEMU's ("Length mismatch: pc.ram").
type snapshotMeta struct {
	Format     string         `json:"format"`
	Accel      string         `json:"accel"`
	MemoryMB   int            `json:"memory_mb"`
	VCPUs      int            `json:"vcpus"`
	Disks      []snapshotDisk `json:"disks"`
	StateBytes int64          `json:"state_bytes"`
}

// snapshotDisk is a disk as the saved devices see it. Its format is not
// part of it: a copy gets the saved disk's content through an overlay of
// another format (qcow2 over raw), which the guest cannot tell.
type snapshotDisk struct {
	ReadOnly bool `json:"read_only"`
}

const (
	metaFormat = "evalsi-qemu-snapshot-1"
	stateFile  = "state"
	metaFile   = "qemu.json"
	stateFD    = "evalsi-state"
)

func metaOf(spec vm.BootSpec, accel string) snapshotMeta {
	m := snapshotMeta{Format: metaFormat, Accel: accel, MemoryMB: spec.MemoryMB, VCPUs: spec.VCPUs}
	for _, d := range spec.Disks {
		m.Disks = append(m.Disks, snapshotDisk{ReadOnly: d.ReadOnly})
	}
	return m
}

// Save pauses m, migrates its state into dir/state through a descriptor
// passed over QMP (QEMU 7.2 has no file: URI, and its seccomp filter
// forbids exec:), then quits it. On failure m is killed: it is paused
// with a half-written state, and the caller discards it.
func (v *VMM) Save(ctx context.Context, vmm vm.Machine, dir string) error {
	m, ok := vmm.(*machine)
	if !ok {
		return fmt.Errorf("qemu rung: cannot save a %T: not a machine the qemu VMM started", vmm)
	}
	if err := m.Err(); err != nil {
		return fmt.Errorf("qemu rung: cannot save a machine that has ended: %w", err)
	}
	start := time.Now()
	size, err := m.save(ctx, dir)
	if err != nil {
		m.Kill()
		os.Remove(filepath.Join(dir, stateFile))
		return fmt.Errorf("qemu rung: saving %s into %s: %w", m.spec.Dir, dir, err)
	}
	v.log.InfoContext(ctx, "qemu: saved", "dir", dir, "state_bytes", size, "took", time.Since(start))
	return nil
}

func (m *machine) save(ctx context.Context, dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	if err := m.qmp.execute(ctx, "stop", nil, nil); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(filepath.Join(dir, stateFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := m.qmp.executeFile(ctx, "getfd", map[string]any{"fdname": stateFD}, nil, f); err != nil {
		return 0, err
	}
	// The machine is paused, so there is nothing to throttle for: the
	// default cap (128 MiB/s) would make a 256 MB guest take seconds.
	if err := m.qmp.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}, nil); err != nil {
		return 0, err
	}
	if err := m.qmp.execute(ctx, "migrate", map[string]any{"uri": "fd:" + stateFD}, nil); err != nil {
		return 0, err
	}
	if _, err := m.qmp.waitMigration(ctx); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	meta := metaOf(m.spec, m.accel)
	meta.StateBytes = st.Size()
	// The metadata is written last, by rename: its presence says the
	// state beside it is whole.
	b, _ := json.MarshalIndent(meta, "", "  ")
	tmp := filepath.Join(dir, metaFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, metaFile)); err != nil {
		return 0, err
	}
	m.saved.Store(true)
	// quit's reply may or may not arrive before the socket closes.
	if err := m.qmp.execute(ctx, "quit", nil, nil); err != nil {
		select {
		case <-m.done:
		default:
			return 0, err
		}
	}
	select {
	case <-m.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for qemu to quit: %w", context.Cause(ctx))
	}
	return st.Size(), nil
}

// Stop ends the machine cleanly (vm.Stopper): QEMU quits, which flushes
// its block devices (a qcow2 overlay's cached metadata included) before it
// exits; a QEMU that does not quit within ctx is killed.
func (m *machine) Stop(ctx context.Context) error {
	if err := m.qmp.execute(ctx, "quit", nil, nil); err != nil {
		select {
		case <-m.done:
			return nil
		default:
		}
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		m.Kill()
		return fmt.Errorf("qemu did not quit: %w", context.Cause(ctx))
	}
}

// Restore starts QEMU with spec's devices waiting for an incoming
// migration, feeds it dir/state through a descriptor, and resumes the
// guest once the state is in. The guest sees its control port's host end
// reconnect: a new listener in spec.Dir, connected before Restore returns.
func (v *VMM) Restore(ctx context.Context, spec vm.BootSpec, dir string) (vm.Machine, error) {
	spec = withDefaults(spec)
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, fmt.Errorf("qemu rung: restoring from %s: no complete saved state (%w): save a machine there first", dir, err)
	}
	var saved snapshotMeta
	if err := json.Unmarshal(b, &saved); err != nil || saved.Format != metaFormat {
		return nil, fmt.Errorf("qemu rung: restoring from %s: %s is not a %s file (%v)", dir, metaFile, metaFormat, err)
	}
	want := metaOf(spec, saved.Accel)
	want.StateBytes = saved.StateBytes
	if w, s := fmt.Sprintf("%+v", want), fmt.Sprintf("%+v", saved); w != s {
		return nil, fmt.Errorf("qemu rung: restoring from %s: the state was saved from a machine of %s, the spec asks for %s: restore with the saved machine's memory, vCPUs and disks", dir, s, w)
	}
	state, err := os.Open(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("qemu rung: restoring from %s: %w", dir, err)
	}
	defer state.Close()
	start := time.Now()
	m, err := v.start(ctx, spec, saved.Accel, true)
	if err != nil {
		return nil, err
	}
	if err := m.restore(ctx, state); err != nil {
		m.Kill()
		return nil, fmt.Errorf("qemu rung: restoring %s from %s: %w (%v)", spec.Dir, dir, err, m.Err())
	}
	v.log.InfoContext(ctx, "qemu: restored", "dir", spec.Dir, "from", dir, "pid", m.cmd.Process.Pid, "took", time.Since(start))
	return m, nil
}

func (m *machine) restore(ctx context.Context, state *os.File) error {
	if err := m.qmp.executeFile(ctx, "getfd", map[string]any{"fdname": stateFD}, nil, state); err != nil {
		return err
	}
	if err := m.qmp.execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:" + stateFD}, nil); err != nil {
		return err
	}
	if _, err := m.qmp.waitMigration(ctx); err != nil {
		return err
	}
	// A machine saved paused stays paused after the migration.
	return m.qmp.execute(ctx, "cont", nil, nil)
}

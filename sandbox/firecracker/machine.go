package firecracker

import (
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"evals.si/sandbox/vm"
	"evals.si/sandbox/vm/vmproc"
)

// Files Save writes in a snapshot directory.
const (
	vmstateName  = "vmstate"
	memoryName   = "memory"
	snapMetaName = "firecracker-snapshot.json"
)

// snapshotMeta is what Restore needs to know about a snapshot besides
// Firecracker's own files.
type snapshotMeta struct {
	// DrivesReadOnly has one entry per drive, in order: the snapshot's
	// devices expect that many disks, read-only as recorded.
	DrivesReadOnly []bool `json:"drives_read_only"`
}

// Boot starts Firecracker, configures the machine over its API, starts it
// and connects the control channel on vsock port ControlPort.
func (v *VMM) Boot(ctx context.Context, spec vm.BootSpec) (vm.Machine, error) {
	if err := checkSpec(&spec); err != nil {
		return nil, err
	}
	if spec.Kernel == "" {
		return nil, errors.New("firecracker: BootSpec.Kernel is empty: the rung needs a guest kernel")
	}
	w, err := v.newWorkdir(spec.Dir)
	if err != nil {
		return nil, fmt.Errorf("firecracker: %w", err)
	}
	src := bootSource{BootArgs: bootArgs(spec.Cmdline)}
	if src.KernelImagePath, err = w.place(spec.Kernel, kernelName, false); err != nil {
		return nil, errors.Join(fmt.Errorf("firecracker: kernel: %w", err), w.remove())
	}
	if spec.Initrd != "" {
		if src.InitrdPath, err = w.place(spec.Initrd, initrdName, false); err != nil {
			return nil, errors.Join(fmt.Errorf("firecracker: initrd: %w", err), w.remove())
		}
	}
	drives, err := placeDrives(w, spec.Disks)
	if err != nil {
		return nil, errors.Join(err, w.remove())
	}
	m, err := v.start(ctx, spec, w)
	if err != nil {
		return nil, err
	}
	steps := []apiStep{
		{"PUT", "/boot-source", src},
		{"PUT", "/machine-config", machineConfig{VCPUCount: spec.VCPUs, MemSizeMiB: spec.MemoryMB}},
	}
	for _, d := range drives {
		steps = append(steps, apiStep{"PUT", "/drives/" + d.DriveID, d})
	}
	steps = append(steps,
		// No network interface: egress goes through the guest's tunnel
		// over the control channel.
		apiStep{"PUT", "/vsock", vsockDevice{GuestCID: guestCID, UDSPath: vsockName}},
		apiStep{"PUT", "/actions", instanceAction{ActionType: "InstanceStart"}},
	)
	for _, s := range steps {
		if err := m.api.call(ctx, s.method, s.path, s.body); err != nil {
			return nil, m.fail(fmt.Errorf("firecracker: configuring the machine: %w", err))
		}
	}
	if err := m.connect(ctx); err != nil {
		return nil, m.fail(err)
	}
	v.log.Debug("firecracker machine booted", "dir", spec.Dir, "pid", m.cmd.Process.Pid, "jail", w.jailDir)
	return m, nil
}

// apiStep is one API request of a boot.
type apiStep struct {
	method, path string
	body         any
}

// Save pauses m, writes a full snapshot (vmstate, memory) under dir and
// stops m. When the snapshot cannot be made, m is resumed and keeps
// running.
func (v *VMM) Save(ctx context.Context, mach vm.Machine, dir string) error {
	m, ok := mach.(*machine)
	if !ok {
		return fmt.Errorf("firecracker: Save got a %T, which this VMM did not boot", mach)
	}
	select {
	case <-m.done:
		return fmt.Errorf("firecracker: Save: the machine is not running: %w", m.exitErr)
	default:
	}
	dir, err := filepath.Abs(dir)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("firecracker: Save: %w", err)
	}
	// A jailed Firecracker can write only inside its jail: the files are
	// made there and moved out once it has stopped.
	statePath, memPath := filepath.Join(dir, vmstateName), filepath.Join(dir, memoryName)
	if m.w.jailed {
		statePath, memPath = vmstateName, memoryName
	}
	if err := m.api.call(ctx, "PATCH", "/vm", vmState{State: "Paused"}); err != nil {
		return fmt.Errorf("firecracker: Save: pausing: %w", err)
	}
	create := snapshotCreate{SnapshotType: "Full", SnapshotPath: statePath, MemFilePath: memPath}
	if err := m.api.call(ctx, "PUT", "/snapshot/create", create); err != nil {
		err = fmt.Errorf("firecracker: Save: %w", err)
		if rerr := m.api.call(context.WithoutCancel(ctx), "PATCH", "/vm", vmState{State: "Resumed"}); rerr != nil {
			return errors.Join(err, fmt.Errorf("and resuming the machine failed, it stays paused: %w", rerr))
		}
		return err
	}
	// The snapshot is complete once the API has answered: Firecracker
	// has no graceful stop for a paused VM, so it is killed.
	m.stop()
	var errs []error
	if m.w.jailed {
		errs = append(errs, moveFile(m.w.host(vmstateName), filepath.Join(dir, vmstateName)),
			moveFile(m.w.host(memoryName), filepath.Join(dir, memoryName)))
	}
	meta := snapshotMeta{DrivesReadOnly: make([]bool, len(m.disks))}
	for i, d := range m.disks {
		meta.DrivesReadOnly[i] = d.ReadOnly
	}
	data, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, snapMetaName), data, 0o644); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, m.Kill())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("firecracker: Save: %w", err)
	}
	v.log.Debug("firecracker snapshot saved", "dir", dir)
	return nil
}

// Restore starts Firecracker, loads the snapshot Save wrote under dir and
// resumes it, with spec's disks in the saved drives' places, and connects
// a fresh control channel (vsock connections do not survive a snapshot;
// the guest's listening socket does). spec's kernel, command line, vCPUs
// and memory are the snapshot's and are ignored.
func (v *VMM) Restore(ctx context.Context, spec vm.BootSpec, dir string) (vm.Machine, error) {
	if err := checkSpec(&spec); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("firecracker: Restore: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, snapMetaName))
	if err != nil {
		return nil, fmt.Errorf("firecracker: Restore: %w (was %s written by Save?)", err, dir)
	}
	var meta snapshotMeta
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("firecracker: Restore: %s: %w", filepath.Join(dir, snapMetaName), err)
	}
	if len(spec.Disks) != len(meta.DrivesReadOnly) {
		return nil, fmt.Errorf("firecracker: Restore: the snapshot in %s has %d drives, the spec %d: a copy needs a disk for each saved drive", dir, len(meta.DrivesReadOnly), len(spec.Disks))
	}
	for i, d := range spec.Disks {
		if d.ReadOnly != meta.DrivesReadOnly[i] {
			return nil, fmt.Errorf("firecracker: Restore: disk %d (%s) has read-only %t, the saved drive %t", i, d.Path, d.ReadOnly, meta.DrivesReadOnly[i])
		}
	}
	w, err := v.newWorkdir(spec.Dir)
	if err != nil {
		return nil, fmt.Errorf("firecracker: %w", err)
	}
	// The snapshot names its drives drive0… relative to Firecracker's
	// working directory: the links made here are this copy's disks.
	if _, err := placeDrives(w, spec.Disks); err != nil {
		return nil, errors.Join(err, w.remove())
	}
	load := snapshotLoad{
		SnapshotPath: filepath.Join(dir, vmstateName),
		MemBackend:   memoryBackend{BackendType: "File", BackendPath: filepath.Join(dir, memoryName)},
		ResumeVM:     true,
	}
	if w.jailed {
		// Firecracker only reads (and maps privately) both files, so
		// every copy can share them.
		if load.SnapshotPath, err = w.place(load.SnapshotPath, vmstateName, false); err == nil {
			load.MemBackend.BackendPath, err = w.place(load.MemBackend.BackendPath, memoryName, false)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("firecracker: Restore: %w", err), w.remove())
		}
	}
	m, err := v.start(ctx, spec, w)
	if err != nil {
		return nil, err
	}
	if err := m.api.call(ctx, "PUT", "/snapshot/load", load); err != nil {
		return nil, m.fail(fmt.Errorf("firecracker: Restore from %s: %w", dir, err))
	}
	if err := m.connect(ctx); err != nil {
		return nil, m.fail(err)
	}
	v.log.Debug("firecracker machine restored", "dir", spec.Dir, "snapshot", dir, "pid", m.cmd.Process.Pid)
	return m, nil
}

// checkSpec validates spec and defaults its zero fields.
func checkSpec(spec *vm.BootSpec) error {
	if st, err := os.Stat(spec.Dir); err != nil || !st.IsDir() {
		return fmt.Errorf("firecracker: BootSpec.Dir %q must be an existing directory (stat: %v)", spec.Dir, err)
	}
	if spec.VCPUs == 0 {
		spec.VCPUs = DefaultVCPUs
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = DefaultMemoryMB
	}
	if spec.VCPUs < 1 || spec.VCPUs > MaxVCPUs {
		return fmt.Errorf("firecracker: %d vCPUs: Firecracker runs 1 to %d", spec.VCPUs, MaxVCPUs)
	}
	if spec.MemoryMB < 0 {
		return fmt.Errorf("firecracker: memory %d MiB is negative", spec.MemoryMB)
	}
	for i, d := range spec.Disks {
		switch d.Format {
		case "", "raw":
		case "qcow2":
			return fmt.Errorf("firecracker: disk %d (%s) is qcow2, and Firecracker reads raw images only: give the Firecracker rung raw disks (qemu-img convert -O raw)", i, d.Path)
		default:
			return fmt.Errorf("firecracker: disk %d (%s) has format %q: Firecracker reads raw images only", i, d.Path, d.Format)
		}
		if d.Path == "" {
			return fmt.Errorf("firecracker: disk %d has no path", i)
		}
	}
	return nil
}

// placeDrives links the disks into the working directory as drive0… and
// returns their API bodies. The first disk is the root device: Firecracker
// attaches it first, so the guest sees it as /dev/vda.
func placeDrives(w *workdir, disks []vm.Disk) ([]drive, error) {
	out := make([]drive, len(disks))
	for i, d := range disks {
		name := driveName(i)
		path, err := w.place(d.Path, name, !d.ReadOnly)
		if err != nil {
			return nil, fmt.Errorf("firecracker: disk %d: %w", i, err)
		}
		out[i] = drive{DriveID: name, PathOnHost: path, IsRootDevice: i == 0, IsReadOnly: d.ReadOnly}
	}
	return out, nil
}

// bootArgs is the guest's command line: the caller's, then the control
// channel and the serial console (the last console= is the kernel's
// primary one), reboot=k so that a guest reboot ends Firecracker, and
// pci=off (Firecracker's devices are virtio-mmio). A guest without panic=
// would hang on a panic until killed: panic=1 makes it reboot, which ends
// Firecracker too.
func bootArgs(cmdline string) string {
	args := strings.Fields(cmdline)
	hasPanic := false
	for _, a := range args {
		hasPanic = hasPanic || strings.HasPrefix(a, "panic=")
	}
	args = append(args, "evalsi.control=vsock:"+strconv.Itoa(ControlPort), "console=ttyS0", "reboot=k", "pci=off")
	if !hasPanic {
		args = append(args, "panic=1")
	}
	return strings.Join(args, " ")
}

// machine is one Firecracker process and its guest.
type machine struct {
	cmd     *exec.Cmd
	api     *apiClient
	w       *workdir
	disks   []vm.Disk
	con     *vmproc.Console
	log     *slog.Logger
	control net.Conn

	done    chan struct{}
	exitErr error // set before done is closed
	killed  atomic.Bool

	killOnce sync.Once
	killErr  error
}

func (m *machine) Control() io.ReadWriteCloser { return m.control }
func (m *machine) Done() <-chan struct{}       { return m.done }

func (m *machine) Err() error {
	select {
	case <-m.done:
		return m.exitErr
	default:
		return nil
	}
}

// Kill stops Firecracker, waits for it, closes the control channel and
// removes the jail. It is idempotent.
func (m *machine) Kill() error {
	m.killOnce.Do(func() {
		m.stop()
		if m.control != nil {
			m.control.Close()
		}
		m.api.close()
		m.killErr = m.w.remove()
	})
	return m.killErr
}

// stop kills the process, when it still runs, and waits for it.
func (m *machine) stop() {
	select {
	case <-m.done:
		return
	default:
	}
	m.killed.Store(true)
	_ = m.cmd.Process.Kill()
	<-m.done
}

// fail kills a machine that did not finish starting and returns err with
// how the process ended. An API request that failed other than with an
// answer usually means Firecracker died: its exit (and its last words in
// the console log) is worth a moment's wait.
func (m *machine) fail(err error) error {
	var apiErr *APIError
	if !errors.As(err, &apiErr) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		select {
		case <-m.done:
		case <-time.After(time.Second):
		}
	}
	exited := false
	select {
	case <-m.done:
		exited = true
	default:
	}
	kerr := m.Kill()
	if exited {
		err = fmt.Errorf("%w; %w", err, m.exitErr)
	} else {
		err = fmt.Errorf("%w (console: %s)", err, m.con.Path())
	}
	return errors.Join(err, kerr)
}

// start runs Firecracker (through the jailer when configured) in w, with
// its serial console kept in spec.Dir/console.log (bounded: see
// vmproc.Console), and waits for its API socket. ctx bounds the wait, not
// the process.
func (v *VMM) start(ctx context.Context, spec vm.BootSpec, w *workdir) (*machine, error) {
	apiSock, vsock := w.host(apiSockName), w.host(vsockName)
	for _, p := range []string{apiSock, vsock} {
		if len(p) > maxSunPath {
			return nil, errors.Join(fmt.Errorf("firecracker: socket path %s is %d bytes, longer than the %d a unix socket address holds: use a shorter machine directory (or chroot base)", p, len(p), maxSunPath), w.remove())
		}
		// A socket left by an earlier process in this directory would
		// make Firecracker's bind fail.
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, errors.Join(fmt.Errorf("firecracker: %w", err), w.remove())
		}
	}
	con, err := vmproc.OpenConsole(filepath.Join(spec.Dir, consoleName), v.log)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("firecracker: %w", err), w.remove())
	}
	var cmd *exec.Cmd
	if w.jailed {
		cmd = exec.Command(v.opts.Jailer, w.jailerArgs()...)
	} else {
		cmd = exec.Command(w.execFile, "--api-sock", apiSock)
		cmd.Dir = w.root
	}
	// Firecracker writes the guest's serial console and its own log to
	// stdout; stderr gets its fatal errors. Both go, through one pipe
	// the engine drains at once (a guest flooding its console must not
	// stall Firecracker, nor grow a host file without bound), into the
	// console log, whose tail Err reports. The engine's environment
	// (credentials) is not Firecracker's business.
	cmd.Stdout, cmd.Stderr = con, con
	cmd.Env = []string{}
	// Wait returns once Firecracker has exited and the pipe is drained,
	// or this long after it exited if something else holds the pipe.
	cmd.WaitDelay = time.Second
	// Its own process group keeps a terminal's ^C from reaching the VM
	// before the engine has saved or killed it; vmproc.Start adds the
	// death signal that kills it with the engine, as the qemu rung's
	// machines are (the jailer's change of user clears that signal, so a
	// jailed Firecracker has it only until the jailer execs it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	waited, err := vmproc.Start(cmd)
	if err != nil {
		con.Close()
		return nil, errors.Join(fmt.Errorf("firecracker: starting %s: %w", cmd.Path, err), w.remove())
	}
	m := &machine{cmd: cmd, api: newAPIClient(apiSock), w: w, disks: spec.Disks, con: con, log: v.log, done: make(chan struct{})}
	go m.wait(waited)
	if err := m.waitSocket(ctx, apiSock, "API socket"); err != nil {
		return nil, m.fail(err)
	}
	return m, nil
}

// wait reaps the process and says how it ended.
func (m *machine) wait(waited <-chan error) {
	err := <-waited
	if cerr := m.con.Close(); cerr != nil {
		m.log.Warn("firecracker: the guest's console log is incomplete", "err", cerr)
	}
	how := "exited with status 0"
	switch {
	case m.killed.Load():
		how = "was stopped by Kill"
	case err != nil:
		how = "exited: " + err.Error()
	}
	m.exitErr = fmt.Errorf("firecracker (pid %d) %s; the end of %s:\n%s", m.cmd.Process.Pid, how, m.con.Path(), consoleEnd(m.con, 2048))
	close(m.done)
}

// waitSocket waits until path accepts connections.
func (m *machine) waitSocket(ctx context.Context, path, what string) error {
	delay := 5 * time.Millisecond
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("firecracker: %s %s never appeared", what, path)
		case <-ctx.Done():
			return fmt.Errorf("firecracker: %s %s did not appear in time (%v): %w", what, path, err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// connect opens the control channel: Firecracker's hybrid vsock takes a
// connection on v.sock, a "CONNECT <port>\n" line, and answers
// "OK <host port>\n" once the guest accepts, or closes the connection when
// nothing listens on the port yet, which is retried until ctx ends.
func (m *machine) connect(ctx context.Context) error {
	path := m.w.host(vsockName)
	delay := 10 * time.Millisecond
	var last error
	for {
		conn, err := vsockConnect(ctx, path, ControlPort)
		if err == nil {
			m.control = conn
			return nil
		}
		last = err
		select {
		case <-m.done:
			return fmt.Errorf("firecracker: connecting the control channel (vsock port %d): %w", ControlPort, last)
		case <-ctx.Done():
			return fmt.Errorf("firecracker: the guest did not accept the control channel on vsock port %d in time (last attempt: %v; is evalsi-guest listening? see the console log): %w", ControlPort, last, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// vsockConnect makes one attempt at Firecracker's host-initiated
// connection handshake. It reads the answer a byte at a time so that
// nothing the guest sends right after it is consumed.
func vsockConnect(ctx context.Context, path string, port int) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	if _, err := fmt.Fprintf(conn, "CONNECT %d\n", port); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vsock %s: sending CONNECT: %w", path, err)
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		if _, err := conn.Read(b); err != nil {
			conn.Close()
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("vsock %s: closed before OK: nothing listens on guest port %d yet", path, port)
			}
			return nil, fmt.Errorf("vsock %s: reading the answer to CONNECT: %w", path, err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	reply := string(line)
	hostPort, ok := strings.CutPrefix(reply, "OK ")
	if _, err := strconv.ParseUint(hostPort, 10, 32); !ok || err != nil {
		conn.Close()
		return nil, fmt.Errorf("vsock %s: CONNECT %d answered %q, not \"OK <port>\"", path, port, reply)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// consoleEnd is the console log's last n bytes, from memory: there even
// when the disk was full.
func consoleEnd(con *vmproc.Console, n int) string {
	if t := con.Tail(n); t != "" {
		return t
	}
	return "(the console log is empty)"
}

package vm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
	"evals.si/sandbox/limits"
)

// proxyPort is where a guest whose policy reaches the egress proxy listens
// for it (HTTP(S)_PROXY), as the bwrap rung's forwarder does.
const proxyPort = 3128

// Sandbox is one microVM.
type Sandbox struct {
	r       *Rung
	cfg     sandbox.Config
	set     sandbox.VMSettings
	boot    BootFiles
	life    *sandbox.Lifecycle
	inst    *instance
	root    Disk // the disk the machine's writable copy is over
	workdir string
	baseEnv map[string]string
	state   string // the sandbox's state directory (snapshot layers go next to it)
	cache   string // the rung's cache
	owned   bool

	mu     sync.Mutex
	policy sandbox.Policy
	setup  execproto.SetupMsg
	report sandbox.Report
}

// Create boots (or takes from the warm pool, or restores from the setup
// snapshot) a VM for cfg and sets its guest up.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (_ sandbox.Sandbox, err error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("the %s rung boots an image: set environment.image, or sandbox.%s.default_image for environments that name none", r.Name(), r.Name())
	}
	set, err := r.settings()
	if err != nil {
		return nil, err
	}
	cache, err := r.cacheDir()
	if err != nil {
		return nil, err
	}
	bf, err := r.bootFiles(ctx, cache, set)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{r: r, cfg: cfg, set: set, boot: bf, cache: cache, life: sandbox.NewLifecycle(r.Name()), policy: cfg.Policy}
	s.workdir = cfg.Workdir
	if s.workdir == "" {
		s.workdir = "/workspace"
	}
	if s.state, s.owned, err = sandbox.StateDir(cfg.StateDir, r.Name()); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && s.owned {
			os.RemoveAll(s.state)
		}
	}()
	var stateDir string // a VM snapshot to restore
	switch len(cfg.Layers) {
	case 0:
		path, err := RootDisk(ctx, filepath.Join(cache, "disks"), diskKey(cfg), cfg.Root, r.opts.FreeMB)
		if err != nil {
			return nil, fmt.Errorf("making the root disk of %s: %w", orRoot(cfg), err)
		}
		s.root = Disk{Path: path, Format: "raw"}
		if s.root, stateDir, err = r.bootSnapshot(ctx, bf, set, s.root, cache); err != nil {
			return nil, err
		}
	case 1:
		l, err := r.readLayer(cfg.Layers[0])
		if err != nil {
			return nil, err
		}
		s.root, stateDir = l.boot(), l.state()
	default:
		return nil, fmt.Errorf("the %s rung takes one snapshot layer, got %d", r.Name(), len(cfg.Layers))
	}
	s.inst, err = r.take(ctx, poolKey{root: s.root.Path, state: stateDir, vcpus: set.VCPUs, mem: set.MemoryMB}, bf, set, s.root, stateDir, cache)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.inst.kill()
		}
	}()
	hostname, err := sandbox.NewHostname()
	if err != nil {
		return nil, err
	}
	resolv, _ := os.ReadFile("/etc/resolv.conf")
	s.setup = execproto.SetupMsg{
		Workdir: s.workdir, ReadOnlyRoot: cfg.ReadOnlyRoot, Hostname: hostname,
		Etc: []execproto.EtcFile{
			{Path: "/etc/hosts", Data: sandbox.EtcHosts(hostname)},
			{Path: "/etc/hostname", Data: []byte(hostname + "\n")},
			{Path: "/etc/resolv.conf", Data: sandbox.ResolvConf(resolv)},
		},
		MemoryMB: cfg.Limits.MemoryMB, PidsMax: cfg.Limits.PidsMax, FileSizeMB: cfg.Limits.FileSizeMB, DiskMB: cfg.Limits.DiskMB,
		CPUMillis: int(math.Round(cfg.Limits.CPUs * 1000)),
	}
	if err := s.applyPolicy(ctx, cfg.Policy); err != nil {
		return nil, err
	}
	s.baseEnv = map[string]string{"HOME": "/root"}
	if st, err := os.Stat(filepath.Join(cfg.Root, "root")); err != nil || !st.IsDir() {
		s.baseEnv["HOME"] = "/tmp"
	}
	for k, v := range cfg.Env {
		s.baseEnv[k] = v
	}
	s.report = s.makeReport()
	return s, nil
}

func orRoot(cfg sandbox.Config) string {
	if cfg.Image != "" {
		return cfg.Image
	}
	return cfg.Root
}

// applyPolicy sets the guest up for p: its proxy listener, and where its
// tunnelled connections go.
func (s *Sandbox) applyPolicy(ctx context.Context, p sandbox.Policy) error {
	s.mu.Lock()
	m := s.setup
	m.ProxyPort = 0
	proxy := ""
	if p.Network != sandbox.NetworkDeny && p.Network != "" {
		if p.ProxyAddr == "" {
			s.mu.Unlock()
			return fmt.Errorf("network %s needs an egress proxy address", p.Network)
		}
		m.ProxyPort, proxy = proxyPort, p.ProxyAddr
	}
	s.mu.Unlock()
	s.inst.proxy.Store(&proxy)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.inst.request(ctx, execproto.FrameSetup, m.Marshal()); err != nil {
		return fmt.Errorf("setting the %s guest up: %w", s.r.Name(), err)
	}
	s.mu.Lock()
	s.setup, s.policy = m, p
	s.mu.Unlock()
	return nil
}

// SetPolicy widens the network for the commands that follow.
func (s *Sandbox) SetPolicy(p sandbox.Policy) error {
	if err := s.life.Usable(); err != nil {
		return err
	}
	if err := s.applyPolicy(context.Background(), p); err != nil {
		return err
	}
	s.mu.Lock()
	s.report.Network, s.report.ProxyAddr = p.Network, p.ProxyAddr
	s.report.Notes = append(slices.Clone(s.report.Notes), "widened by SetPolicy: network "+p.Network+" through the egress proxy")
	s.mu.Unlock()
	return nil
}

func (s *Sandbox) currentPolicy() sandbox.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// commandEnv is a request's environment, as on the bwrap rung.
func (s *Sandbox) commandEnv(req sandbox.ExecRequest) ([]string, error) {
	env := map[string]string{}
	for k, v := range s.baseEnv {
		env[k] = v
	}
	if _, set := s.cfg.Env["HOME"]; req.User != "" && !set {
		delete(env, "HOME")
	}
	if pol := s.currentPolicy(); pol.Network != sandbox.NetworkDeny && pol.Network != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = fmt.Sprintf("http://127.0.0.1:%d", proxyPort)
		}
		np := sandbox.NoProxy(pol.AllowHosts, s.setup.Hostname)
		env["NO_PROXY"], env["no_proxy"] = np, np
	}
	return sandbox.CommandEnv(env, req.Env)
}

func (s *Sandbox) user(req sandbox.ExecRequest) string {
	if req.User != "" {
		return req.User
	}
	return s.cfg.User
}

// Exec runs a command in the guest.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Argv) == 0 {
		return sandbox.ExecResult{}, errors.New("exec: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return sandbox.ExecResult{}, err
	}
	defer s.life.End()
	env, err := s.commandEnv(req)
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	timeout := sandbox.CommandTimeout(s.cfg, req)
	limit := sandbox.OutputLimit(req)
	m := execproto.ExecMsg{Argv: req.Argv, Env: env, Dir: sandbox.InSandboxPath(s.workdir, req.Workdir), Stdin: req.Stdin, Limit: limit, Spec: s.user(req)}
	out := sandbox.NewOutputStream(limit, req.Output)
	defer out.Stop()
	c := s.inst.c
	start := time.Now()
	call, err := c.Start(m, func(p []byte) { out.Stdout().Write(p) }, func(p []byte) { out.Stderr().Write(p) })
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	defer c.Forget(call)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, killed bool
	var stopErr error
	var grace <-chan time.Time
	var ex execproto.ExitMsg
wait:
	for {
		select {
		case ex = <-call.Exit:
			break wait
		case <-c.Done():
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w", c.Err())
		case <-timer.C:
			timedOut = true
		case <-ctx.Done():
			stopErr = fmt.Errorf("exec: %w", ctx.Err())
		case <-s.life.Done():
			stopErr = fmt.Errorf("exec: %s sandbox closed while the command ran", s.r.Name())
		case <-grace:
			return sandbox.ExecResult{}, fmt.Errorf("exec: the %s guest did not stop the command", s.r.Name())
		}
		if (timedOut || stopErr != nil) && !killed {
			killed = true
			c.Kill(call)
			grace = time.After(10 * time.Second)
		}
	}
	if ex.Setup != "" {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %s", ex.Setup)
	}
	// The output ends soon after the exit (the guest bounds its drain to
	// 2 s); a guest that never says so is broken, not slow.
	var done execproto.DoneMsg
	select {
	case done = <-call.Done:
	case <-c.Done():
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", c.Err())
	case <-time.After(time.Minute):
		return sandbox.ExecResult{}, fmt.Errorf("exec: the %s guest reported the command's exit but never its end", s.r.Name())
	}
	stdout, stderr := out.Bytes()
	res := sandbox.ExecResult{
		ExitCode: ex.Code, Stdout: stdout, Stderr: stderr,
		Truncated: done.TruncatedStdout || done.TruncatedStderr || out.Truncated(),
		TimedOut:  timedOut, Duration: time.Since(start),
	}
	if killed {
		res.ExitCode = 128 + int(syscall.SIGKILL)
	}
	if timedOut {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("killed after %s", timeout)})
	}
	for _, d := range done.Denials {
		res.Denials = append(res.Denials, s.guestDenial(d))
	}
	return res, stopErr
}

// guestDenial is a denial the guest recorded: its seccomp supervisor's
// refusals (the filter of the bwrap rung), and its cgroups' oom and pids
// events.
func (s *Sandbox) guestDenial(d execproto.Denial) sandbox.Denial {
	times := ""
	if d.Count > 1 {
		times = fmt.Sprintf(" (%d times)", d.Count)
	}
	switch d.Kind {
	case "syscall", "network":
	default:
		return sandbox.Denial{Kind: d.Kind, Detail: d.Detail + times}
	}
	switch {
	case d.Syscall == -1:
		return sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%d more refused attempts of this kind, not listed", d.Count)}
	case d.Kind == "network":
		return sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s refused%s: network %s, the guest has only loopback", d.Detail, times, s.currentPolicy().Network)}
	}
	name := limits.SyscallName(d.Syscall)
	if name == "" {
		name = "syscall " + strconv.Itoa(d.Syscall)
	}
	if d.Detail != "" {
		name += "(" + d.Detail + ")"
	}
	if limits.IsSignalSyscall(d.Syscall) {
		return sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s ignored: PID 1 is the guest's init, which takes no signal from commands%s", name, times)}
	}
	return sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s refused by seccomp (EPERM)%s", name, times)}
}

// ReadFile reads a regular file as the guest sees it.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	res, err := s.fileOp(ctx, execproto.FileMsg{Path: sandbox.InSandboxPath(s.workdir, p), Max: sandbox.MaxReadFile})
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	return res.Data, nil
}

// WriteFile writes a regular file into the guest, creating parents.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	abs := sandbox.InSandboxPath(s.workdir, p)
	if strings.HasSuffix(p, "/") || abs == "/" {
		return &fs.PathError{Op: "write", Path: p, Err: errors.New("not a file path")}
	}
	if _, err := s.fileOp(ctx, execproto.FileMsg{Write: true, Path: abs, Data: data, Mode: uint32(mode.Perm())}); err != nil {
		if errors.Is(err, syscall.EROFS) && s.cfg.ReadOnlyRoot {
			err = fmt.Errorf("%w (read_only_root: only %s and /tmp are writable)", err, s.workdir)
		}
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	return nil
}

func (s *Sandbox) fileOp(ctx context.Context, m execproto.FileMsg) (execproto.FileResult, error) {
	if err := s.life.Begin(); err != nil {
		return execproto.FileResult{}, err
	}
	defer s.life.End()
	res, err := s.inst.c.Request(ctx, execproto.FrameFile, m.Marshal())
	if err != nil {
		return res, err
	}
	return res, res.AsError()
}

// StartService starts the guest's long-running process.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("starting a service: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	defer s.life.End()
	env, err := s.commandEnv(req)
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	state := &sandbox.ServiceState{}
	c := s.inst.c
	m := execproto.ExecMsg{Argv: req.Argv, Env: env, Dir: sandbox.InSandboxPath(s.workdir, req.Workdir), Limit: math.MaxInt, Spec: s.user(req), Service: true}
	call, err := c.Start(m, func(p []byte) { state.Write(p) }, func(p []byte) { state.Write(p) })
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	var early *execproto.ExitMsg
	select {
	case <-call.Started:
	case ex := <-call.Exit:
		if ex.Setup != "" {
			c.Forget(call)
			return nil, fmt.Errorf("starting a service: %s", ex.Setup)
		}
		early = &ex
	case <-c.Done():
		return nil, fmt.Errorf("starting a service: %w", c.Err())
	case <-ctx.Done():
		c.Kill(call)
		c.Forget(call)
		return nil, fmt.Errorf("starting a service: %w", ctx.Err())
	}
	go func() {
		code := 128 + int(syscall.SIGKILL)
		if early != nil {
			code = early.Code
		} else {
			select {
			case ex := <-call.Exit:
				code = ex.Code
			case <-c.Done():
			}
		}
		select {
		case <-call.Done:
		case <-c.Done():
		}
		c.Forget(call)
		state.SetExited(code)
	}()
	return state, nil
}

// Report describes the isolation.
func (s *Sandbox) Report() sandbox.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.report
}

func (s *Sandbox) makeReport() sandbox.Report {
	rep := sandbox.Report{
		Rung: s.r.Name(), Isolation: sandbox.LevelVM,
		Network: s.cfg.Policy.Network, ProxyAddr: s.cfg.Policy.ProxyAddr,
		UIDMap:       []string{"no user namespace: ids are the guest kernel's, and nothing inside maps to a host id (the VM is the boundary)"},
		Capabilities: slices.Sorted(slices.Values(sandbox.ContainerCapabilities)),
	}
	l := s.cfg.Limits
	if l.MemoryMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("memory.max=%dMiB per command (guest cgroup)", l.MemoryMB))
	}
	if l.PidsMax > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("pids.max=%d per command (guest cgroup)", l.PidsMax))
	}
	if l.CPUs > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("cpu.max=%.2f CPUs per command (guest cgroup)", l.CPUs))
	}
	if l.FileSizeMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("fsize=%dMiB (RLIMIT_FSIZE)", l.FileSizeMB))
	}
	rep.Limits = append(rep.Limits,
		fmt.Sprintf("vm: %d vCPU, %d MiB", s.set.VCPUs, s.set.MemoryMB),
		fmt.Sprintf("timeout=%s", sandbox.CommandTimeout(s.cfg, sandbox.ExecRequest{})))
	how := "booted"
	if s.inst.restored {
		how = "restored from a VM snapshot (clock set and fresh entropy mixed in after the restore)"
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("a %s microVM with its own kernel (%s), %s; evalsi-guest is its init and serves the exec protocol over the VMM's control channel", s.r.Name(), s.boot.Release, how),
		"no network device: only loopback exists in the guest; "+vmNetNote(s.cfg.Policy.Network),
		"commands run as root of the guest (or the user asked for) with Docker's default capabilities only: no module loading, raw I/O, mount, ptrace or reboot; kernel modules are disabled after the guest's own are loaded",
		"root: the image's ext4 disk (cached by digest) under a private copy-on-write layer per sandbox",
		"seccomp: the bwrap rung's filter, supervised by the guest's init, so refusals are reported as they are there")
	if l.DiskMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("disk=%dMB (the root disk's free space, the rest reserved by an immutable file)", l.DiskMB))
	}
	if s.cfg.ReadOnlyRoot {
		rep.Notes = append(rep.Notes, "read-only root: only "+s.workdir+" and /tmp are writable")
	}
	return rep
}

func vmNetNote(network string) string {
	if network == sandbox.NetworkDeny {
		return "network deny: nothing listens for the proxy and no path out exists"
	}
	return fmt.Sprintf("egress goes to 127.0.0.1:%d in the guest, carried over the control channel to the host's logging egress proxy", proxyPort)
}

// Close kills the VM and removes its state.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.life.Close(func() error {
		err := s.inst.kill()
		if s.owned {
			if rerr := os.RemoveAll(s.state); rerr != nil && err == nil {
				err = rerr
			}
		}
		return err
	})
}

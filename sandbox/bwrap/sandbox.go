package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/overlay"
	"evals.si/sandbox/reexec"
)

// hostSystemDirs are bound read-only from the host when there is no image.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// hiddenHostFiles are covered by an empty file when the host's /etc is
// bound: the sandbox's root maps to the host's root user, which owns them.
var hiddenHostFiles = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers"}

// hiddenHostDirs are covered by an empty tmpfs (engine configuration may
// hold keys; SSH host keys).
var hiddenHostDirs = []string{"/etc/evalsi", "/etc/ssh", "/etc/sudoers.d"}

// In-sandbox paths of the helper binary and the egress proxy socket.
const (
	sandboxHelper    = "/.evalsi/evalsi"
	sandboxProxySock = "/.evalsi/proxy.sock"
	proxyListen      = "127.0.0.1:3128"
)

// Sandbox is one bubblewrap sandbox.
type Sandbox struct {
	cfg      sandbox.Config
	bwrap    string
	helper   string
	id       string
	state    string
	ownState bool
	stub     string
	tmp      string
	workdir  string
	noImage  bool
	root     *overlay.Root
	cgroups  *limits.Cgroups
	rlimits  limits.Plan
	nproc    bool // RLIMIT_NPROC applied inside (non-root engines only)
	seccomp  []byte
	proxy    string // host path of the proxy socket bound into the sandbox
	bridge   net.Listener
	useInit  bool
	uid, gid int
	baseEnv  map[string]string
	report   sandbox.Report
	seq      atomic.Int64
	// widened is set by SetPolicy: later commands share the host network.
	widened atomic.Bool

	mu        sync.Mutex
	closed    bool
	snapshot  bool
	running   sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ sandbox.Snapshotter = (*Sandbox)(nil)

// Create builds the sandbox's root and state; commands run in Exec.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (_ sandbox.Sandbox, err error) {
	bw, err := r.bwrapPath()
	if err != nil {
		return nil, err
	}
	helper, err := r.helperPath()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg, bwrap: bw, helper: helper, noImage: cfg.Root == "", done: make(chan struct{})}
	if s.cfg.Policy.Network == "" {
		s.cfg.Policy.Network = sandbox.NetworkDeny
	}
	switch s.cfg.Policy.Network {
	case sandbox.NetworkDeny, sandbox.NetworkAllow, sandbox.NetworkAllowlist:
	default:
		return nil, fmt.Errorf("creating a bwrap sandbox: unknown network mode %q (deny, allowlist or allow)", cfg.Policy.Network)
	}
	s.workdir = cfg.Workdir
	if s.workdir == "" {
		s.workdir = sandbox.DefaultWorkdir
	}
	if !path.IsAbs(s.workdir) || path.Clean(s.workdir) == "/" {
		return nil, fmt.Errorf("creating a bwrap sandbox: workdir %q must be an absolute path below /", s.workdir)
	}
	s.workdir = path.Clean(s.workdir)
	if s.noImage {
		for _, d := range append(slices.Clone(hostSystemDirs), "proc", "dev", "tmp", ".evalsi") {
			if s.workdir == "/"+d || strings.HasPrefix(s.workdir, "/"+d+"/") {
				return nil, fmt.Errorf("creating a bwrap sandbox: workdir %s is inside /%s, which is the host's (read-only) or the sandbox's own; use a path such as %s", s.workdir, d, sandbox.DefaultWorkdir)
			}
		}
	}
	b := make([]byte, 6)
	rand.Read(b)
	s.id = hex.EncodeToString(b)

	if cfg.StateDir == "" {
		if s.state, err = os.MkdirTemp("", "evalsi-bwrap-"); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox state dir: %w", err)
		}
		s.ownState = true
	} else {
		s.state = cfg.StateDir
		if err := os.MkdirAll(s.state, 0o700); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox state dir: %w", err)
		}
	}
	defer func() {
		if err != nil {
			s.cleanup()
		}
	}()

	s.stub = filepath.Join(s.state, "stub")
	if err := buildStub(s.stub, s.noImage); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: preparing mount points: %w", err)
	}
	s.tmp = filepath.Join(s.state, "tmp")
	if err := os.Mkdir(s.tmp, 0o777); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}
	if err := os.Chmod(s.tmp, 0o1777); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}

	var lowers []string
	for _, l := range cfg.Layers {
		if l.Dir == "" {
			return nil, fmt.Errorf("creating a bwrap sandbox: layer %q has no directory (bwrap stacks directory layers only)", l.Ref)
		}
		lowers = append(lowers, l.Dir)
	}
	if cfg.Root != "" {
		lowers = append(lowers, cfg.Root)
	}
	lowers = append(lowers, s.stub)
	if s.root, err = overlay.Mount(lowers, s.state); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(s.root.Merged, s.workdir), 0o755); err != nil {
		return nil, fmt.Errorf("creating workdir %s: %w", s.workdir, err)
	}

	etc := filepath.Join(s.root.Merged, "etc")
	if s.noImage {
		etc = "/etc"
	}
	if s.uid, s.gid, err = sandboxUser(cfg.User, etc); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}

	var cgNote string
	if s.cgroups, cgNote, err = limits.Detect(cfg.Limits.Cgroup, r.host()); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: sandbox.cgroup %q: %w", cfg.Limits.Cgroup, err)
	}
	s.rlimits = limits.PlanRlimits(cfg.Limits, !s.cgroups.HasMemory())
	s.nproc = os.Geteuid() != 0 && s.rlimits.NProc > 0
	if s.seccomp, err = limits.SeccompFilter(); err != nil {
		return nil, err
	}

	if s.cfg.Policy.Network == sandbox.NetworkAllowlist {
		if err := s.setupProxy(); err != nil {
			return nil, err
		}
	}
	s.useInit = s.proxy != ""
	if s.useInit && !s.noImage {
		// The helper runs inside the image: a dynamically linked build
		// needs the image to have its loader (and libc).
		if interp := elfInterpreter(helper); interp != "" {
			if _, err := os.Stat(filepath.Join(s.root.Merged, interp)); err != nil {
				return nil, fmt.Errorf("creating a bwrap sandbox: network allowlist runs %s inside the image, but it is dynamically linked (%s) and the image lacks that loader; build evalsi with CGO_ENABLED=0", helper, interp)
			}
		}
	}

	s.baseEnv = map[string]string{}
	if _, ok := cfg.Env["HOME"]; !ok {
		s.baseEnv["HOME"] = "/tmp"
		if st, err := os.Stat(filepath.Join(s.root.Merged, "root")); err == nil && st.IsDir() && !s.noImage {
			s.baseEnv["HOME"] = "/root"
		}
	}
	for k, v := range cfg.Env {
		s.baseEnv[k] = v
	}
	s.report = s.makeReport(cgNote)
	return s, nil
}

func (s *Sandbox) makeReport(cgNote string) sandbox.Report {
	rep := sandbox.Report{
		Rung:      sandbox.RungBwrap,
		Isolation: sandbox.LevelNamespaced,
		Network:   s.cfg.Policy.Network,
		ProxyAddr: s.cfg.Policy.ProxyAddr,
	}
	rep.Limits = append(rep.Limits, s.cgroups.Plan(s.cfg.Limits)...)
	for _, rl := range s.rlimits.Outer {
		rep.Limits = append(rep.Limits, rl.Describe())
	}
	if s.nproc {
		rep.Limits = append(rep.Limits, limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc}.Describe())
	}
	rep.Limits = append(rep.Limits, fmt.Sprintf("timeout=%s", sandbox.CommandTimeout(s.cfg, sandbox.ExecRequest{})))
	rep.Notes = append(rep.Notes, cgNote)
	if !s.nproc && s.cgroups == nil {
		rep.Notes = append(rep.Notes, "no process cap: RLIMIT_NPROC does not bind uid 0 and no pids cgroup is available; fork bombs are bounded only by the command timeout")
	} else if !s.nproc {
		rep.Notes = append(rep.Notes, "RLIMIT_NPROC not used (the sandbox's root is the host's uid 0, which the kernel exempts); the pids cgroup caps processes")
	}
	if !s.cgroups.HasMemory() && s.cfg.Limits.MemoryMB > 0 {
		rep.Notes = append(rep.Notes, "memory is capped by RLIMIT_AS (address space): allocations fail instead of an OOM kill, and runtimes reserving large virtual ranges may need more")
	}
	rep.Notes = append(rep.Notes, "namespaces: user, mount, pid, net, ipc, uts, cgroup; capabilities: none; seccomp denies "+strings.Join(limits.DeniedSyscallNames(), ", "))
	if s.noImage {
		rep.Notes = append(rep.Notes, "no image: the host's /usr, /bin, /sbin, /lib*, /etc read-only ("+strings.Join(hiddenHostFiles, ", ")+" and "+strings.Join(hiddenHostDirs, ", ")+" hidden)")
	}
	if n := s.root.Note(); n != "" {
		rep.Notes = append(rep.Notes, n)
	} else {
		rep.Notes = append(rep.Notes, "root: overlayfs over the image and snapshot layers with a private upper directory")
	}
	if s.uid != 0 || s.gid != 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("user %q runs as uid %d gid %d inside; the user namespace maps only that id, to the engine's own uid %d, so file access is the engine user's", s.cfg.User, s.uid, s.gid, os.Geteuid()))
	}
	if s.cfg.ReadOnlyRoot {
		rep.Notes = append(rep.Notes, "read-only root: only "+s.workdir+" and /tmp are writable")
	}
	if s.proxy != "" {
		rep.Notes = append(rep.Notes, "allowlist: no network namespace route out; HTTP(S)_PROXY=http://"+proxyListen+" forwards to the egress proxy's socket")
	}
	return rep
}

// buildStub makes the lowest layer: mount points bwrap needs even when the
// root is read-only, and, without an image, the host's system directory
// layout (symlinks such as bin -> usr/bin copied as symlinks).
func buildStub(dir string, noImage bool) error {
	for _, d := range []string{"", "proc", "dev", "tmp", ".evalsi"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	for _, f := range []string{"evalsi", "proxy.sock", "empty"} {
		if err := os.WriteFile(filepath.Join(dir, ".evalsi", f), nil, 0o644); err != nil {
			return err
		}
	}
	if !noImage {
		return nil
	}
	for _, d := range hostSystemDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(dir, d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// setupProxy makes the egress proxy reachable as a unix socket on the host
// (the proxy's own, or a bridge to its TCP address) for binding inside.
func (s *Sandbox) setupProxy() error {
	addr := s.cfg.Policy.ProxyAddr
	if addr == "" {
		return errors.New("creating a bwrap sandbox: network allowlist needs an egress proxy (policy proxy_addr is empty)")
	}
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if st, err := os.Stat(p); err != nil || st.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("creating a bwrap sandbox: egress proxy socket %s is not a unix socket: %v", p, err)
		}
		s.proxy = p
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("creating a bwrap sandbox: egress proxy address %q: want unix:/path or host:port: %w", addr, err)
	}
	sock := filepath.Join(s.state, "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("creating a bwrap sandbox: bridging to egress proxy %s: %w", addr, err)
	}
	s.bridge, s.proxy = ln, sock
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				up, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					slog.Warn("bwrap sandbox cannot reach the egress proxy", "proxy", addr, "err", err)
					c.Close()
					return
				}
				splice(c, up)
			}()
		}
	}()
	return nil
}

func (s *Sandbox) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("bwrap sandbox is closed")
	case s.snapshot:
		return errors.New("bwrap sandbox was snapshotted; create a new sandbox from its layer")
	}
	s.running.Add(1)
	return nil
}

// Exec runs one command as one bwrap invocation.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Argv) == 0 {
		return sandbox.ExecResult{}, errors.New("exec: empty argv")
	}
	if err := s.begin(); err != nil {
		return sandbox.ExecResult{}, err
	}
	defer s.running.Done()

	envMap := map[string]string{}
	for k, v := range s.baseEnv {
		envMap[k] = v
	}
	if s.proxy != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			envMap[k] = "http://" + proxyListen
		}
		envMap["NO_PROXY"], envMap["no_proxy"] = "localhost,127.0.0.1", "localhost,127.0.0.1"
	}
	env, err := sandbox.CommandEnv(envMap, req.Env)
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	cwd := sandbox.InSandboxPath(s.workdir, req.Workdir)
	timeout := sandbox.CommandTimeout(s.cfg, req)

	var cg *limits.Cgroup
	if s.cgroups != nil {
		if cg, err = s.cgroups.New(fmt.Sprintf("evalsi-%s-%d", s.id, s.seq.Add(1)), s.cfg.Limits); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		defer cg.Remove()
	}

	secR, secW, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer secR.Close()
	if _, err := secW.Write(s.seccomp); err != nil {
		secW.Close()
		return sandbox.ExecResult{}, fmt.Errorf("exec: passing the seccomp filter: %w", err)
	}
	secW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer stR.Close()

	blR, blW, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer blR.Close()
	defer blW.Close()

	cmd := exec.Command(s.bwrap, s.bwrapArgs(env, cwd, req.Argv)...)
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{secR, stW, blR} // fds 3, 4, 5
	limit := sandbox.OutputLimit(req)
	stdout, stderr := sandbox.NewCappedBuffer(limit), sandbox.NewCappedBuffer(limit)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		stW.Close()
		return sandbox.ExecResult{}, fmt.Errorf("exec: starting bwrap: %w", err)
	}
	stW.Close()
	blR.Close()
	childc := make(chan int, 1)
	statusc := make(chan bwrapStatus, 1)
	go func() { statusc <- readStatus(stR, childc) }()
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	kill := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if cg != nil {
			cg.Kill()
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	var stopErr error
	waited := false
	select {
	case pid, ok := <-childc:
		// bwrap's sandbox process exists and is blocked on fd 5 before it
		// forks anything: put it in the command's cgroup and set its
		// rlimits now, so they hold for everything it starts.
		if ok {
			if err := s.confine(pid, cg); err != nil {
				kill()
				<-waitc
				return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
			}
		}
		blW.Write([]byte{0})
		blW.Close()
	case <-waitc:
		waited = true
	}
	if !waited {
		select {
		case <-waitc:
		case <-timer.C:
			timedOut = true
			kill()
			<-waitc
		case <-ctx.Done():
			stopErr = fmt.Errorf("exec: %w", ctx.Err())
			kill()
			<-waitc
		case <-s.done:
			stopErr = errors.New("exec: bwrap sandbox closed while the command ran")
			kill()
			<-waitc
		}
	}
	if cg != nil {
		cg.Kill() // anything that outlived bwrap (it should not)
	}
	st := <-statusc
	res := sandbox.ExecResult{
		Stdout:    stdout.Bytes(),
		Stderr:    stderr.Bytes(),
		Truncated: stdout.Truncated() || stderr.Truncated(),
		TimedOut:  timedOut,
		Duration:  time.Since(start),
	}
	switch {
	case st.exited:
		res.ExitCode = st.exitCode
	case timedOut || stopErr != nil:
		res.ExitCode = 128 + int(syscall.SIGKILL)
	case bytes.Contains(res.Stderr, []byte("bwrap: execvp ")):
		// The command could not be executed (not found, not executable).
		res.ExitCode = 127
	default:
		return res, fmt.Errorf("exec: bwrap failed to set up the sandbox (exit %d): %s", cmd.ProcessState.ExitCode(), strings.TrimSpace(string(res.Stderr)))
	}
	res.Denials = s.denials(res, cg, timedOut, timeout)
	return res, stopErr
}

func (s *Sandbox) denials(res sandbox.ExecResult, cg *limits.Cgroup, timedOut bool, timeout time.Duration) []sandbox.Denial {
	var out []sandbox.Denial
	if timedOut {
		out = append(out, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("command exceeded its %s timeout and was killed", timeout)})
	}
	if cg != nil {
		ev, err := cg.Events()
		if err != nil {
			slog.Warn("reading cgroup events", "err", err)
		}
		if ev.OOMKills > 0 {
			out = append(out, sandbox.Denial{Kind: "oom", Detail: fmt.Sprintf("the OOM killer killed %d process(es) at the %d MB memory limit", ev.OOMKills, s.cfg.Limits.MemoryMB)})
		}
		if ev.PidsMax > 0 {
			out = append(out, sandbox.Denial{Kind: "pids", Detail: fmt.Sprintf("the process limit refused %d fork(s)", ev.PidsMax)})
		}
	}
	if res.ExitCode == 128+int(syscall.SIGXFSZ) {
		out = append(out, sandbox.Denial{Kind: "fsize", Detail: "a file reached the file size limit (SIGXFSZ)"})
	}
	if !s.cgroups.HasMemory() && s.cfg.Limits.MemoryMB > 0 && res.ExitCode != 0 {
		// RLIMIT_AS makes allocations fail; the only trace is the
		// program's own complaint, so this denial is inferred.
		for _, sig := range []string{"MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc"} {
			if bytes.Contains(res.Stderr, []byte(sig)) {
				out = append(out, sandbox.Denial{Kind: "memory", Detail: fmt.Sprintf("allocation failed under rlimit-as=%dMB (inferred from %q on stderr)", s.cfg.Limits.MemoryMB, sig)})
				break
			}
		}
	}
	return out
}

// confine joins the sandbox's first process to the command's cgroup and
// sets the rlimits on it (prlimit); it is blocked, so nothing escapes either.
// RLIMIT_NPROC is set only for a non-root engine: the kernel exempts uid 0.
func (s *Sandbox) confine(pid int, cg *limits.Cgroup) error {
	if cg != nil {
		for _, f := range cg.ProcsFiles() {
			if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
				return fmt.Errorf("joining cgroup: %w", err)
			}
		}
	}
	var rls []limits.Rlimit
	for _, rl := range s.rlimits.Outer {
		// A Go runtime cannot start under a small address-space limit, so
		// the in-sandbox helper applies RLIMIT_AS itself, after starting
		// the proxy forwarder and just before it execs the command.
		if rl.Name == "as" && s.useInit {
			continue
		}
		rls = append(rls, rl)
	}
	if s.nproc {
		rls = append(slices.Clone(rls), limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc})
	}
	for _, rl := range rls {
		if err := rl.ApplyTo(pid); err != nil {
			return err
		}
	}
	return nil
}

// bwrapArgs builds one invocation. Order matters: the root first, then
// mounts on top of it.
func (s *Sandbox) bwrapArgs(env []string, cwd string, argv []string) []string {
	a := []string{"--unshare-all"}
	if s.cfg.Policy.Network == sandbox.NetworkAllow || s.widened.Load() {
		a = append(a, "--share-net")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "evalsi")
	if s.uid != 0 || s.gid != 0 {
		a = append(a, "--uid", strconv.Itoa(s.uid), "--gid", strconv.Itoa(s.gid))
	}
	merged := s.root.Merged
	if s.cfg.ReadOnlyRoot {
		a = append(a, "--ro-bind", merged, "/")
	} else {
		a = append(a, "--bind", merged, "/")
	}
	if s.noImage {
		for _, d := range hostSystemDirs {
			if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
				a = append(a, "--ro-bind", "/"+d, "/"+d)
			}
		}
		empty := filepath.Join(s.stub, ".evalsi", "empty")
		for _, f := range hiddenHostFiles {
			if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
				a = append(a, "--ro-bind", empty, f)
			}
		}
		for _, d := range hiddenHostDirs {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				a = append(a, "--tmpfs", d)
			}
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--bind", s.tmp, "/tmp")
	if s.cfg.ReadOnlyRoot {
		a = append(a, "--bind", filepath.Join(merged, s.workdir), s.workdir)
	}
	if s.useInit {
		a = append(a, "--ro-bind", s.helper, sandboxHelper)
	}
	if s.proxy != "" {
		a = append(a, "--bind", s.proxy, sandboxProxySock)
	}
	a = append(a, "--clearenv")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if s.useInit {
		a = append(a, "--setenv", reexec.Env, helperInit)
	}
	a = append(a, "--chdir", cwd, "--seccomp", "3", "--json-status-fd", "4", "--block-fd", "5", "--")
	if s.useInit {
		a = append(a, sandboxHelper)
		if s.proxy != "" {
			a = append(a, "--forward", sandboxProxySock, proxyListen)
		}
		for _, rl := range s.rlimits.Outer {
			if rl.Name == "as" {
				a = append(a, "--rlimit", rl.String())
			}
		}
		a = append(a, "--")
	}
	return append(a, argv...)
}

type bwrapStatus struct {
	started  bool
	exited   bool
	exitCode int
}

// readStatus reads bwrap's --json-status-fd lines: {"child-pid": N, …} once
// the sandbox exists and {"exit-code": N} when its command ended.
// The child pid is sent on childc (closed at the end) as soon as it is known.
func readStatus(r *os.File, childc chan<- int) bwrapStatus {
	var st bwrapStatus
	defer close(childc)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if v, ok := m["child-pid"]; ok && !st.started {
			st.started = true
			if pid, err := strconv.Atoi(string(v)); err == nil {
				childc <- pid
			}
		}
		if v, ok := m["exit-code"]; ok {
			if n, err := strconv.Atoi(string(v)); err == nil {
				st.exited, st.exitCode = true, n
			}
		}
	}
	return st
}

// Report describes the isolation that applies.
func (s *Sandbox) Report() sandbox.Report {
	r := s.report
	r.Limits = slices.Clone(r.Limits)
	r.Notes = slices.Clone(r.Notes)
	return r
}

// Snapshot moves the sandbox's changes out as a layer directory next to the
// state directory (a rename: constant time). The caller owns the layer and
// removes it when done; the sandbox only accepts Close afterwards.
func (s *Sandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	s.mu.Lock()
	if s.closed || s.snapshot {
		s.mu.Unlock()
		return sandbox.Layer{}, errors.New("snapshot: bwrap sandbox is closed or already snapshotted")
	}
	s.snapshot = true
	s.mu.Unlock()
	s.running.Wait()
	b := make([]byte, 6)
	rand.Read(b)
	dest := filepath.Join(filepath.Dir(s.state), filepath.Base(s.state)+".layer-"+hex.EncodeToString(b))
	if err := s.root.Snapshot(dest); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
	}
	return sandbox.Layer{Dir: dest}, nil
}

// Close kills running commands and removes the sandbox; it is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
		s.running.Wait()
		s.closeErr = s.cleanup()
	})
	return s.closeErr
}

func (s *Sandbox) cleanup() error {
	var errs []error
	if s.bridge != nil {
		s.bridge.Close()
	}
	if s.root != nil {
		if err := s.root.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("removing bwrap sandbox root: %w", err))
		}
	}
	if s.ownState {
		if err := os.RemoveAll(s.state); err != nil {
			errs = append(errs, err)
		}
	} else {
		for _, p := range []string{s.stub, s.tmp, filepath.Join(s.state, "proxy.sock")} {
			if p != "" {
				if err := os.RemoveAll(p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// sandboxUser resolves Config.User ("uid", "uid:gid", "name" or
// "name:group", names looked up in the sandbox root's /etc/passwd and
// /etc/group) to the ids the command sees. An empty user keeps uid 0.
func sandboxUser(user, etc string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	lookup := func(file, name string) (int, int, error) {
		if n, err := strconv.Atoi(name); err == nil && n >= 0 {
			return n, -1, nil
		}
		b, err := os.ReadFile(filepath.Join(etc, file))
		if err != nil {
			return 0, 0, fmt.Errorf("looking up %q: %w", name, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) >= 3 && f[0] == name {
				id, err := strconv.Atoi(f[2])
				if err != nil {
					break
				}
				primary := -1
				if len(f) >= 4 {
					if p, err := strconv.Atoi(f[3]); err == nil {
						primary = p
					}
				}
				return id, primary, nil
			}
		}
		return 0, 0, fmt.Errorf("%q not found in %s", name, filepath.Join(etc, file))
	}
	uid, primary, err := lookup("passwd", u)
	if err != nil {
		return 0, 0, fmt.Errorf("sandbox user %q: %w", user, err)
	}
	gid = uid
	if primary >= 0 {
		gid = primary
	}
	if hasGroup {
		if gid, _, err = lookup("group", g); err != nil {
			return 0, 0, fmt.Errorf("sandbox user %q: %w", user, err)
		}
	}
	return uid, gid, nil
}

// elfInterpreter returns the program interpreter of an ELF executable, ""
// for a static one (or when it cannot be read).
func elfInterpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return ""
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// SetPolicy widens the network for the commands that follow, as a granted
// request_escalation asks. Only deny → allow is supported: an allowlist
// sandbox runs its proxy bridge inside the sandbox's own network
// namespace, which sharing the host's network would break.
func (s *Sandbox) SetPolicy(p sandbox.Policy) error {
	if p.Network != sandbox.NetworkAllow {
		return fmt.Errorf("bwrap sandbox: can only widen the network to %q, not %q", sandbox.NetworkAllow, p.Network)
	}
	if s.cfg.Policy.Network == sandbox.NetworkAllowlist {
		return fmt.Errorf("bwrap sandbox: an allowlist sandbox cannot be widened to allow")
	}
	s.widened.Store(true)
	return nil
}

package landlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/bridge"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/userns"
)

// spec is what the launcher and the restricter are told; it travels over
// a pipe, never through the environment or argv.
type spec struct {
	// Mounts are attached below scratch first; the paths below are there.
	Mounts []mountFD `json:"mounts"`
	Root   string    `json:"root"`
	Lowers []string  `json:"lowers"` // overlay lower dirs, topmost first
	// SysDirs maps host system directories to their read-only mounts
	// (no image: they are bound into the root at the same path).
	SysDirs      map[string]string `json:"sys_dirs,omitempty"`
	Upper        string            `json:"upper,omitempty"`
	OvlWork      string            `json:"ovl_work,omitempty"`
	ReadOnlyRoot bool              `json:"read_only_root,omitempty"`
	Workdir      string            `json:"workdir"`
	WorkSrc      string            `json:"work_src"`
	TmpSrc       string            `json:"tmp_src"`
	Cwd          string            `json:"cwd"`
	Argv         []string          `json:"argv"`
	Env          []string          `json:"env"`
	Network      string            `json:"network"`
	ProxyPort    uint16            `json:"proxy_port,omitempty"`
	// Relay is the egress proxy's relay socket; the launcher forwards
	// 127.0.0.1:ProxyPort of the sandbox's network namespace to it.
	Relay string `json:"relay,omitempty"`
	// Caps are the capabilities the command keeps (none: all dropped).
	Caps []string `json:"caps,omitempty"`
	// File, when set, is done by the launcher instead of a command.
	File *fileOp `json:"file,omitempty"`
	// User is ExecRequest.User, which the launcher resolves into Cred
	// for the restricter; it sets HOME from passwd unless KeepHome.
	User     string `json:"user,omitempty"`
	KeepHome bool   `json:"keep_home,omitempty"`
	Cred     *cred  `json:"cred,omitempty"`
	// CgroupFDs are the launcher's descriptors of the command's
	// cgroup.procs files, opened by the engine.
	CgroupFDs []int `json:"cgroup_fds,omitempty"`
	// Service makes the launcher say when the command was exec'd.
	Service bool `json:"service,omitempty"`
	// EtcDir holds the sandbox's /etc files and Hostname is its
	// hostname (the holder's spec).
	EtcDir      string `json:"etc_dir,omitempty"`
	Hostname    string `json:"hostname,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	FSizeBytes  uint64 `json:"fsize_bytes,omitempty"`
	ABI         int    `json:"abi"`
}

// status is what the launcher reports when it exits.
type status struct {
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal,omitempty"`
	Killed   int  `json:"killed,omitempty"` // leftover processes killed
	Stopped  bool `json:"stopped,omitempty"`
	// Started is a service launcher's message that the command was
	// exec'd; the final status follows when it ends.
	Started  bool   `json:"started,omitempty"`
	SetupErr string `json:"setup_error,omitempty"`
	// FileErr is a file operation's failure (FileErrno its errno, if any).
	FileErr   string `json:"file_error,omitempty"`
	FileErrno int    `json:"file_errno,omitempty"`
	// Denials are what the seccomp filter refused (notify.go).
	Denials []sandbox.Denial `json:"denials,omitempty"`
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// env builds the command's environment: defaults, then the config's, then
// the request's. The engine's own environment never enters.
func (s *Sandbox) env(req map[string]string) []string {
	m := map[string]string{
		"PATH": defaultPath,
		"HOME": s.cfg.Workdir,
		"PWD":  s.cfg.Workdir,
	}
	if s.relay != nil {
		proxy := "http://" + bridge.Listen
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
			m[k] = proxy
		}
		// The sandbox's own loopback (its services, a test server) is
		// reached directly, unless an allowed host is a loopback address
		// (sandbox.NoProxy).
		np := sandbox.NoProxy(s.cfg.Policy.AllowHosts, s.hostname)
		m["NO_PROXY"], m["no_proxy"] = np, np
	}
	for k, v := range s.cfg.Env {
		m[k] = v
	}
	for k, v := range req {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Exec runs argv in the sandbox.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if err := s.usable(); err != nil {
		return sandbox.ExecResult{}, err
	}
	if len(req.Argv) == 0 {
		return sandbox.ExecResult{}, fmt.Errorf("landlock exec: empty argv")
	}
	s.execMu.Lock()
	defer s.execMu.Unlock()
	sp := s.commandSpec(req)
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.cfg.CommandTimeout
	}
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	limit := req.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	cg, err := s.newCgroup()
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("landlock exec: %w", err)
	}
	res, err := s.runLauncher(ctx, sp, cg, req.Stdin, timeout, limit, req.Output)
	if err == nil && s.disk != nil {
		if full, detail, ferr := s.disk.Full(); ferr == nil && full {
			res.Denials = append(res.Denials, sandbox.Denial{Kind: "disk", Detail: detail})
		}
	}
	if cg == nil {
		return res, err
	}
	// The launcher has killed everything it knew of; the cgroup catches
	// anything that escaped its process tree.
	ev, evErr := cg.Events()
	killErr := cg.Kill()
	rmErr := cg.Remove()
	if err != nil {
		return res, err
	}
	if e := errors.Join(evErr, killErr, rmErr); e != nil {
		return res, fmt.Errorf("landlock exec: %w", e)
	}
	if ev.OOMKills > 0 && !hasDenial(res, "oom") {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "oom", Detail: fmt.Sprintf("%d process(es) killed by the OOM killer at the %d MiB cgroup memory limit", ev.OOMKills, s.cfg.Limits.MemoryMB)})
	}
	if ev.PidsMax > 0 {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "pids", Detail: fmt.Sprintf("%d fork(s) refused at the cgroup pids limit", ev.PidsMax)})
	}
	return res, nil
}

// commandSpec is the launcher's spec for req: a command (or service) in
// the holder's root.
func (s *Sandbox) commandSpec(req sandbox.ExecRequest) spec {
	cwd := s.cfg.Workdir
	if req.Workdir != "" {
		cwd = req.Workdir
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(s.cfg.Workdir, cwd)
		}
	}
	sp := s.baseSpec()
	sp.Cwd = filepath.Clean(cwd)
	sp.Argv = req.Argv
	sp.Env = s.env(req.Env)
	sp.User = req.User
	// HOME set explicitly (the environment's or the request's) wins over
	// passwd's, as with docker exec.
	_, inReq := req.Env["HOME"]
	_, inCfg := s.cfg.Env["HOME"]
	sp.KeepHome = inReq || inCfg
	if s.cfg.User == "" {
		sp.Caps = sandbox.ContainerCapabilities
	}
	if mb := s.cfg.Limits.MemoryMB; mb > 0 && !s.memoryByCgroup() {
		sp.MemoryBytes = uint64(mb) << 20
	}
	if mb := s.cfg.Limits.FileSizeMB; mb > 0 {
		sp.FSizeBytes = uint64(mb) << 20
	}
	return sp
}

// baseSpec is what every launcher is told: the root is the holder's.
func (s *Sandbox) baseSpec() spec {
	return spec{
		Root:         "/",
		ReadOnlyRoot: s.cfg.ReadOnlyRoot,
		Workdir:      s.cfg.Workdir,
		Network:      s.cfg.Policy.Network,
		ProxyPort:    s.proxyPort,
		ABI:          s.abi,
	}
}

// newCgroup makes a cgroup for one command or service (nil without
// cgroups).
func (s *Sandbox) newCgroup() (*limits.Cgroup, error) {
	if s.cgroups == nil {
		return nil, nil
	}
	s.mu.Lock()
	s.execs++
	name := fmt.Sprintf("evalsi-landlock-%d-%s-%d", os.Getpid(), filepath.Base(s.state), s.execs)
	s.mu.Unlock()
	return s.cgroups.New(name, s.cfg.Limits)
}

func hasDenial(res sandbox.ExecResult, kind string) bool {
	for _, d := range res.Denials {
		if d.Kind == kind {
			return true
		}
	}
	return false
}

// launchSpec is what the holder is given to build the root, and the host
// directories it needs: the state directory and every lower, seen as
// mounts below scratch.
func (s *Sandbox) launchSpec() (spec, []hostMount) {
	state := s.inLauncher
	sp := spec{
		Root:         state(s.rootDir()),
		ReadOnlyRoot: s.cfg.ReadOnlyRoot,
		Workdir:      s.cfg.Workdir,
		WorkSrc:      state(s.workDir()),
		TmpSrc:       state(s.tmpDir()),
		Upper:        state(s.upperDir()),
		OvlWork:      state(s.ovlWork()),
		Network:      s.cfg.Policy.Network,
		ProxyPort:    s.proxyPort,
		ABI:          s.abi,
	}
	mounts := []hostMount{{name: "state", path: s.state}}
	if s.disk != nil {
		mounts = append(mounts, hostMount{name: "disk", path: s.disk.Dir})
	}
	lower := func(dir string) {
		name := fmt.Sprintf("lower%d", len(sp.Lowers))
		mounts = append(mounts, hostMount{name: name, path: dir, ro: true})
		sp.Lowers = append(sp.Lowers, inScratch(name))
	}
	for _, l := range s.cfg.Layers {
		lower(l.Dir)
	}
	if s.hasImage() {
		lower(s.cfg.Root)
	} else {
		sp.Lowers = append(sp.Lowers, state(s.baseDir()))
		sp.SysDirs = map[string]string{}
		for _, d := range systemDirs {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				name := "sys" + strings.ReplaceAll(d, "/", "-")
				mounts = append(mounts, hostMount{name: name, path: d, ro: true})
				sp.SysDirs[d] = inScratch(name)
			}
		}
	}
	if s.relay != nil {
		mounts = append(mounts, hostMount{name: "relay", path: filepath.Dir(s.relaySock)})
		sp.Relay = inScratch("relay", filepath.Base(s.relaySock))
	}
	return sp, mounts
}

// inLauncher is where the holder sees dir, a directory of the state (or
// disk) directory.
func (s *Sandbox) inLauncher(dir string) string {
	if s.disk != nil && filepath.Dir(dir) == s.disk.Dir {
		return inScratch("disk", filepath.Base(dir))
	}
	return inScratch("state", filepath.Base(dir))
}

// reexecSelf is the binary the launcher runs from.
func reexecSelf() (string, error) { return reexec.Self() }

// selfExe is how the launcher and its helpers are started: the engine's
// own binary through /proc, so the sandbox's root, an unprivileged uid on
// the host, need not be able to walk the directories that hold it (a
// 0700 go-build directory, a home directory).
const selfExe = "/proc/self/exe"

// launched is a launcher the holder started: the engine watches it
// through its pidfd and reads its status when it ends.
type launched struct {
	pidfd   int
	started chan struct{} // closed at a service's Started message
	status  chan status   // closed without a value if it reported none
	ended   chan struct{} // closed once status holds what it will
	output  chan struct{}
	outRs   []*os.File
}

// signal sends sig to the launcher (it kills the command, sweeps, and
// reports on SIGTERM).
func (l *launched) signal(sig syscall.Signal) {
	unix.PidfdSendSignal(l.pidfd, sig, nil, 0)
}

// waitExit waits (at most d) for the launcher to exit, so its cgroup can
// be removed, and closes the pidfd.
func (l *launched) waitExit(d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(l.pidfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if n > 0 || err != nil {
			break
		}
	}
	unix.Close(l.pidfd)
}

// launch starts a launcher for sp in the holder, in cgroup cg (when set),
// with stdin fed from stdin and its stdout and stderr copied to stdout and
// stderr (the same writer gets one pipe for both).
func (s *Sandbox) launch(ctx context.Context, sp spec, cg *limits.Cgroup, stdin []byte, stdout, stderr io.Writer) (*launched, error) {
	h, err := s.ensureHolder(ctx)
	if err != nil {
		return nil, err
	}
	var mine, theirs []*os.File // our ends, the launcher's ends
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		return
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll([]*os.File{inR, inW})
		return nil, err
	}
	mine, theirs = []*os.File{inW, outR}, []*os.File{inR, outW}
	errR, errW := outR, outW
	if stderr != stdout {
		if errR, errW, err = pipe(); err != nil {
			closeAll(append(mine, theirs...))
			return nil, err
		}
		mine, theirs = append(mine, errR), append(theirs, errW)
	}
	specR, specW, err := pipe()
	if err != nil {
		closeAll(append(mine, theirs...))
		return nil, err
	}
	statR, statW, err := pipe()
	if err != nil {
		closeAll(append(mine, theirs...))
		closeAll([]*os.File{specR, specW})
		return nil, err
	}
	mine, theirs = append(mine, specW, statR), append(theirs, specR, statW)
	childFds := []*os.File{inR, outW, errW, specR, statW}
	// The launcher puts the restricter, before it starts the command,
	// into the cgroup through these: the kernel checks a cgroup.procs
	// write against the opener's credentials, the engine's, which the
	// sandbox's root lacks. The launcher itself stays out, so its own
	// threads and memory count against none of the command's limits (a
	// fork bomb at pids_max cannot starve it of threads).
	if cg != nil {
		for _, p := range cg.ProcsFiles() {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				closeAll(append(mine, theirs...))
				return nil, fmt.Errorf("opening cgroup %s: %w", p, err)
			}
			theirs, childFds = append(theirs, f), append(childFds, f)
			sp.CgroupFDs = append(sp.CgroupFDs, len(childFds)-1) // its fd number there
		}
	}
	pidfd, err := h.start(childFds)
	closeAll(theirs)
	if err != nil {
		closeAll(mine)
		return nil, err
	}
	l := &launched{pidfd: pidfd, started: make(chan struct{}), status: make(chan status, 1), ended: make(chan struct{}), output: make(chan struct{})}
	go func() {
		json.NewEncoder(specW).Encode(sp)
		specW.Close()
	}()
	go func() {
		inW.Write(stdin)
		inW.Close()
	}()
	var copies sync.WaitGroup
	copies.Add(1)
	go func() { defer copies.Done(); io.Copy(stdout, outR) }()
	l.outRs = []*os.File{outR}
	if errR != outR {
		l.outRs = append(l.outRs, errR)
		copies.Add(1)
		go func() { defer copies.Done(); io.Copy(stderr, errR) }()
	}
	go func() {
		copies.Wait()
		close(l.output)
	}()
	go func() {
		defer statR.Close()
		dec := json.NewDecoder(statR)
		for {
			var st status
			if err := dec.Decode(&st); err != nil {
				break
			}
			if st.Started {
				close(l.started)
				continue
			}
			l.status <- st
			break
		}
		close(l.status)
		close(l.ended)
	}()
	return l, nil
}

// finishOutput waits (at most d) for the output copies to end, which they
// do once nothing in the sandbox holds the pipes, then closes our ends.
func (l *launched) finishOutput(d time.Duration) {
	select {
	case <-l.output:
	case <-time.After(d):
		for _, f := range l.outRs {
			f.Close()
		}
		<-l.output
	}
	for _, f := range l.outRs {
		f.Close()
	}
}

// runLauncher runs a command (or file operation) to its end, giving its
// output to output (nil: none) as the pipes deliver it.
func (s *Sandbox) runLauncher(ctx context.Context, sp spec, cg *limits.Cgroup, stdin []byte, timeout time.Duration, limit int, output sandbox.OutputFunc) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	out := sandbox.NewOutputStream(limit, output)
	// Before any return: the hook is never called after Exec returns.
	defer out.Stop()
	start := time.Now()
	l, err := s.launch(ctx, sp, cg, stdin, out.Stdout(), out.Stderr())
	if err != nil {
		return res, fmt.Errorf("landlock exec: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	stopped := false
	var hardKill <-chan time.Time
	cancelled := ctx.Done()
	var st status
	var gotStatus bool
loop:
	for {
		select {
		case st, gotStatus = <-l.status:
			break loop
		case <-timer.C:
			res.TimedOut = true
			stopped = true
			// The launcher kills the command and everything it left, then exits.
			l.signal(syscall.SIGTERM)
			hardKill = time.After(10 * time.Second)
		case <-cancelled:
			cancelled = nil
			stopped = true
			l.signal(syscall.SIGTERM)
			hardKill = time.After(10 * time.Second)
		case <-hardKill:
			l.signal(syscall.SIGKILL)
			hardKill = nil
		}
	}
	// Output pipes stay open only as long as something in the sandbox
	// holds them, which the launcher's sweep prevents; this bounds a
	// broken launcher.
	l.finishOutput(10 * time.Second)
	l.waitExit(10 * time.Second)
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = out.Bytes()
	res.Truncated = out.Truncated()

	if !gotStatus {
		if ctx.Err() != nil {
			return res, fmt.Errorf("landlock exec: %w", ctx.Err())
		}
		return res, fmt.Errorf("landlock exec: launcher ended without a status: %s", strings.TrimSpace(string(res.Stderr)))
	}
	if st.SetupErr != "" {
		return res, fmt.Errorf("landlock exec: setting up the sandbox: %s", st.SetupErr)
	}
	if stopped && !res.TimedOut && ctx.Err() != nil {
		return res, fmt.Errorf("landlock exec: %w", ctx.Err())
	}
	if sp.File != nil {
		if res.TimedOut {
			return res, errors.New("the file operation did not finish")
		}
		if st.FileErr != "" {
			return res, &launcherFileError{msg: st.FileErr, errno: syscall.Errno(st.FileErrno)}
		}
		return res, nil
	}
	res.ExitCode = st.ExitCode
	res.Denials = append(res.Denials, st.Denials...)
	if res.TimedOut {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("killed after %s", timeout)})
		if res.ExitCode == 0 {
			res.ExitCode = 128 + int(syscall.SIGKILL)
		}
	}
	// The signal may have hit a child of a shell, which then exits 128+25.
	if sp.FSizeBytes > 0 && (st.Signal == int(syscall.SIGXFSZ) || res.ExitCode == 128+int(syscall.SIGXFSZ)) {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "fsize", Detail: fmt.Sprintf("file size limit %d bytes exceeded (SIGXFSZ)", sp.FSizeBytes)})
	}
	if sp.MemoryBytes > 0 && !res.TimedOut && res.ExitCode != 0 && looksLikeOOM(st, res.Stderr) {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "oom", Detail: fmt.Sprintf("address-space limit %d MiB (RLIMIT_AS) hit", sp.MemoryBytes>>20)})
	}
	return res, nil
}

// looksLikeOOM infers a memory-limit failure: RLIMIT_AS makes allocations
// fail rather than killing, so the evidence is the program's own report of
// a failed allocation, or a crash by SIGSEGV/SIGABRT/SIGBUS.
func looksLikeOOM(st status, stderr []byte) bool {
	switch syscall.Signal(st.Signal) {
	case syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGBUS:
		return true
	}
	low := strings.ToLower(string(stderr))
	for _, m := range []string{"memoryerror", "cannot allocate memory", "out of memory", "bad_alloc", "memory exhausted", "failed to allocate"} {
		if strings.Contains(low, m) {
			return true
		}
	}
	return false
}

// launcherNamespaces are the holder's namespaces besides its user
// namespace: its own mounts, PID namespace (it is init: when it exits,
// everything left in the sandbox dies, and host processes are not in its
// /proc), network namespace (loopback only: deny has no route anywhere,
// allowlist and allow reach only the forwarded egress proxy), IPC and
// hostname. Each launcher adds a PID and mount namespace of its own.
const launcherNamespaces = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// probeUserNS starts `true`-equivalent: the engine re-executed with the
// probe helper inside a user and mount namespace.
func probeUserNS(ctx context.Context, m userns.IDMap) error {
	self := selfExe
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = []string{reexec.Env + "=" + probeName}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: launcherNamespaces}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.Start(cmd, self); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

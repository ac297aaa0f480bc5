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
	"strconv"
	"strings"
	"syscall"
	"time"

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
	File        *fileOp `json:"file,omitempty"`
	MemoryBytes uint64  `json:"memory_bytes,omitempty"`
	FSizeBytes  uint64  `json:"fsize_bytes,omitempty"`
	ABI         int     `json:"abi"`
}

// status is what the launcher reports when it exits.
type status struct {
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Killed   int    `json:"killed,omitempty"` // leftover processes killed
	Stopped  bool   `json:"stopped,omitempty"`
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
		// Everything through the proxy: the sandbox's own loopback holds
		// nothing but the forwarder.
		proxy := "http://" + bridge.Listen
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
			m[k] = proxy
		}
		m["NO_PROXY"], m["no_proxy"] = "", ""
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
	cwd := s.cfg.Workdir
	if req.Workdir != "" {
		cwd = req.Workdir
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(s.cfg.Workdir, cwd)
		}
	}
	sp, mounts := s.launchSpec()
	sp.Cwd = filepath.Clean(cwd)
	sp.Argv = req.Argv
	sp.Env = s.env(req.Env)
	if s.cfg.User == "" {
		sp.Caps = sandbox.ContainerCapabilities
	}
	if mb := s.cfg.Limits.MemoryMB; mb > 0 && !s.memoryByCgroup() {
		sp.MemoryBytes = uint64(mb) << 20
	}
	if mb := s.cfg.Limits.FileSizeMB; mb > 0 {
		sp.FSizeBytes = uint64(mb) << 20
	}
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
	var cg *limits.Cgroup
	if s.cgroups != nil {
		s.mu.Lock()
		s.execs++
		name := fmt.Sprintf("evalsi-landlock-%d-%s-%d", os.Getpid(), filepath.Base(s.state), s.execs)
		s.mu.Unlock()
		var err error
		if cg, err = s.cgroups.New(name, s.cfg.Limits); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("landlock exec: %w", err)
		}
	}
	res, err := s.runLauncher(ctx, sp, mounts, cg, req.Stdin, timeout, limit)
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

func hasDenial(res sandbox.ExecResult, kind string) bool {
	for _, d := range res.Denials {
		if d.Kind == kind {
			return true
		}
	}
	return false
}

// launchSpec is what every launcher is given, and the host directories it
// needs: the state directory and every lower, seen as mounts below scratch.
func (s *Sandbox) launchSpec() (spec, []hostMount) {
	state := func(dir string) string {
		if s.disk != nil && filepath.Dir(dir) == s.disk.Dir {
			return inScratch("disk", filepath.Base(dir))
		}
		return inScratch("state", filepath.Base(dir))
	}
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

// reexecSelf is the binary the launcher runs from.
func reexecSelf() (string, error) { return reexec.Self() }

// selfExe is how the launcher and its helpers are started: the engine's
// own binary through /proc, so the sandbox's root, an unprivileged uid on
// the host, need not be able to walk the directories that hold it (a
// 0700 go-build directory, a home directory).
const selfExe = "/proc/self/exe"

func (s *Sandbox) runLauncher(ctx context.Context, sp spec, mounts []hostMount, cg *limits.Cgroup, stdin []byte, timeout time.Duration, limit int) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	self := selfExe
	// fds 3 and 4 are the spec and status pipes; the mounts follow.
	mountFiles, mfds, err := openMounts(mounts, s.nsFile, 5)
	if err != nil {
		return res, fmt.Errorf("landlock exec: %w", err)
	}
	defer func() {
		for _, f := range mountFiles {
			f.Close()
		}
	}()
	sp.Mounts = mfds
	specR, specW, err := os.Pipe()
	if err != nil {
		return res, fmt.Errorf("landlock exec: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return res, fmt.Errorf("landlock exec: %w", err)
	}
	defer statR.Close()
	stdout := sandbox.NewCappedBuffer(limit)
	stderr := sandbox.NewCappedBuffer(limit)
	cmd := exec.Command(self)
	cmd.Env = []string{reexec.Env + "=" + launcherName}
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = append([]*os.File{specR, statW}, mountFiles...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		// If the engine dies, the launcher still kills what it started.
		Pdeathsig:  syscall.SIGTERM,
		Cloneflags: launcherNamespaces,
	}
	// Output pipes stay open only as long as something in the sandbox holds
	// them, which the launcher prevents; this bounds a broken launcher.
	cmd.WaitDelay = 10 * time.Second

	start := time.Now()
	err = s.idmap.Start(cmd, self)
	specR.Close()
	statW.Close()
	if err != nil {
		specW.Close()
		return res, fmt.Errorf("landlock exec: starting launcher %s: %w", self, err)
	}
	// The launcher waits for its spec, so it joins the cgroup (from here:
	// as root of its namespace it may not write the host's cgroup files)
	// before it starts anything.
	if cg != nil {
		for _, f := range cg.ProcsFiles() {
			if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
				specW.Close()
				cmd.Process.Kill()
				cmd.Wait()
				return res, fmt.Errorf("landlock exec: moving the launcher into cgroup %s: %w", f, err)
			}
		}
	}
	go func() {
		json.NewEncoder(specW).Encode(sp)
		specW.Close()
	}()
	var statBuf bytes.Buffer
	statDone := make(chan struct{})
	go func() {
		io.Copy(&statBuf, statR)
		close(statDone)
	}()

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var werr error
	stopped := false
	var hardKill <-chan time.Time
	cancelled := ctx.Done()
loop:
	for {
		select {
		case werr = <-waitErr:
			break loop
		case <-timer.C:
			res.TimedOut = true
			stopped = true
			// The launcher kills the command and everything it left, then exits.
			cmd.Process.Signal(syscall.SIGTERM)
			hardKill = time.After(10 * time.Second)
		case <-cancelled:
			cancelled = nil
			stopped = true
			cmd.Process.Signal(syscall.SIGTERM)
			hardKill = time.After(10 * time.Second)
		case <-hardKill:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			hardKill = nil
		}
	}
	<-statDone
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.Truncated() || stderr.Truncated()

	var st status
	if err := json.Unmarshal(statBuf.Bytes(), &st); err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("landlock exec: %w", ctx.Err())
		}
		return res, fmt.Errorf("landlock exec: launcher ended without a status (%v): %s", werr, strings.TrimSpace(string(res.Stderr)))
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

// launcherNamespaces are the launcher's namespaces besides its user
// namespace: its own mounts, PID namespace (it is init: when it exits,
// everything left in the sandbox dies, and host processes are not in its
// /proc), network namespace (loopback only: deny has no route anywhere,
// allowlist and allow reach only the forwarded egress proxy), IPC and
// hostname.
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

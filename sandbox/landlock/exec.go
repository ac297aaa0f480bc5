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
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
)

// spec is what the launcher and the restricter are told; it travels over
// a pipe, never through the environment or argv.
type spec struct {
	Root         string   `json:"root"`
	Lowers       []string `json:"lowers"`             // overlay lower dirs, topmost first
	HostSys      bool     `json:"host_sys,omitempty"` // bind the host's system directories read-only
	Upper        string   `json:"upper,omitempty"`
	OvlWork      string   `json:"ovl_work,omitempty"`
	ReadOnlyRoot bool     `json:"read_only_root,omitempty"`
	Workdir      string   `json:"workdir"`
	WorkSrc      string   `json:"work_src"`
	TmpSrc       string   `json:"tmp_src"`
	Cwd          string   `json:"cwd"`
	Argv         []string `json:"argv"`
	Env          []string `json:"env"`
	Network      string   `json:"network"`
	ProxyPort    uint16   `json:"proxy_port,omitempty"`
	MemoryBytes  uint64   `json:"memory_bytes,omitempty"`
	FSizeBytes   uint64   `json:"fsize_bytes,omitempty"`
	ABI          int      `json:"abi"`
	// CgroupProcs are the cgroup.procs files the launcher joins first.
	CgroupProcs []string `json:"cgroup_procs,omitempty"`
}

// status is what the launcher reports when it exits.
type status struct {
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Killed   int    `json:"killed,omitempty"` // leftover processes killed
	Stopped  bool   `json:"stopped,omitempty"`
	SetupErr string `json:"setup_error,omitempty"`
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
	if s.cfg.Policy.Network == sandbox.NetworkAllowlist {
		proxy := "http://" + s.cfg.Policy.ProxyAddr
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
	sp := spec{
		Root:         s.rootDir(),
		ReadOnlyRoot: s.cfg.ReadOnlyRoot,
		Workdir:      s.cfg.Workdir,
		WorkSrc:      s.workDir(),
		TmpSrc:       s.tmpDir(),
		Cwd:          filepath.Clean(cwd),
		Argv:         req.Argv,
		Env:          s.env(req.Env),
		Network:      s.cfg.Policy.Network,
		ProxyPort:    s.proxyPort,
		ABI:          s.abi,
	}
	for _, l := range s.cfg.Layers {
		sp.Lowers = append(sp.Lowers, l.Dir)
	}
	if s.hasImage() {
		sp.Lowers = append(sp.Lowers, s.cfg.Root)
	} else {
		sp.Lowers = append(sp.Lowers, s.baseDir())
		sp.HostSys = true
	}
	sp.Upper, sp.OvlWork = s.upperDir(), s.ovlWork()
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
		sp.CgroupProcs = cg.ProcsFiles()
	}
	res, err := runLauncher(ctx, sp, req.Stdin, timeout, limit)
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

// reexecSelf is the binary the launcher runs from.
func reexecSelf() (string, error) { return reexec.Self() }

func runLauncher(ctx context.Context, sp spec, stdin []byte, timeout time.Duration, limit int) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	self, err := reexecSelf()
	if err != nil {
		return res, err
	}
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
	cmd.ExtraFiles = []*os.File{specR, statW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		// If the engine dies, the launcher still kills what it started.
		Pdeathsig: syscall.SIGTERM,
	}
	cmd.SysProcAttr.Cloneflags, cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = namespaceFlags()
	// Output pipes stay open only as long as something in the sandbox holds
	// them, which the launcher prevents; this bounds a broken launcher.
	cmd.WaitDelay = 10 * time.Second

	start := time.Now()
	err = cmd.Start()
	specR.Close()
	statW.Close()
	if err != nil {
		specW.Close()
		return res, fmt.Errorf("landlock exec: starting launcher %s: %w", self, err)
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
	res.ExitCode = st.ExitCode
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

// namespaceFlags returns the clone flags for the launcher: a private mount
// namespace, inside a user namespace mapping the caller to root when the
// caller is not root.
func namespaceFlags() (uintptr, []syscall.SysProcIDMap, []syscall.SysProcIDMap) {
	if os.Geteuid() == 0 {
		return syscall.CLONE_NEWNS, nil, nil
	}
	return syscall.CLONE_NEWNS | syscall.CLONE_NEWUSER,
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
}

// probeUserNS starts `true`-equivalent: the engine re-executed with the
// probe helper inside a user and mount namespace.
func probeUserNS(ctx context.Context) error {
	self, err := reexecSelf()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = []string{reexec.Env + "=" + probeName}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	cmd.SysProcAttr.Cloneflags, cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = namespaceFlags()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Package host is the host rung: commands run directly on this machine, in
// a temporary workdir, with NO isolation. It exists for trusted tasks on
// machines where no sandbox works, and is used only when a spec sets
// allow_unsafe_host (sandbox.Select enforces that). It still clears the
// environment, applies rlimits and, where available, a per-command cgroup,
// and kills the command's process group (and cgroup) when it ends.
package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/overlay"
	"evals.si/sandbox/reexec"
)

const helperLaunch = "evalsi-host-launch"

func init() { reexec.Register(helperLaunch, launchMain) }

// Rung runs commands on the host.
type Rung struct {
	// Host is where cgroups are looked for (default limits.ThisHost()).
	Host *limits.Host
}

// New returns the host rung.
func New() *Rung { return &Rung{} }

func (r *Rung) Name() string             { return sandbox.RungHost }
func (r *Rung) Isolation() sandbox.Level { return sandbox.LevelNone }

// Probe always works: the host is always there.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: r.Name(), Isolation: r.Isolation(), Works: true,
		Reason: "runs commands directly on this host with no isolation (only with allow_unsafe_host: true)"}
	if _, err := reexec.Self(); err != nil {
		p.Works, p.Reason = false, err.Error()
	}
	return p
}

// Sandbox is a host "sandbox": a workdir and process-group bookkeeping.
type Sandbox struct {
	cfg      sandbox.Config
	helper   string
	id       string
	state    string
	ownState bool
	workdir  string
	cgroups  *limits.Cgroups
	rlimits  limits.Plan
	report   sandbox.Report
	seq      atomic.Int64

	// services are the running services, killed at Close.
	svcMu    sync.Mutex
	services []*service

	life *sandbox.Lifecycle
}

var _ sandbox.Snapshotter = (*Sandbox)(nil)

// Create makes a workdir on the host, StateDir/work: relative paths, and
// file operations and command workdirs under the configured workdir, land
// there (the report says where it is). Config.Root is refused; Layers[0] (a snapshot
// of an earlier host sandbox's workdir) is copied into the workdir.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (_ sandbox.Sandbox, err error) {
	if cfg.Root != "" || cfg.Image != "" {
		return nil, fmt.Errorf("creating a host sandbox: the host rung cannot use an image (root %q, image %q); use bwrap, landlock or docker", cfg.Root, cfg.Image)
	}
	if cfg.Policy.Network == sandbox.NetworkAllowlist {
		return nil, errors.New("creating a host sandbox: network allowlist cannot be enforced on the host rung")
	}
	helper, err := reexec.Self()
	if err != nil {
		return nil, err
	}
	slog.Warn("CREATING AN UNSANDBOXED HOST ENVIRONMENT: agent commands will run directly on this machine as this user, with full access to its files, processes and network",
		"rung", sandbox.RungHost, "user_uid", os.Geteuid())
	b := make([]byte, 6)
	rand.Read(b)
	s := &Sandbox{cfg: cfg, helper: helper, id: hex.EncodeToString(b), life: sandbox.NewLifecycle("host")}
	if s.state, s.ownState, err = sandbox.StateDir(cfg.StateDir, "host"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.cleanup()
		}
	}()
	s.workdir = filepath.Join(s.state, "work")
	if err := os.Mkdir(s.workdir, 0o755); err != nil {
		return nil, fmt.Errorf("creating a host sandbox workdir: %w", err)
	}
	if len(cfg.Layers) > 0 {
		if cfg.Layers[0].Dir == "" {
			return nil, errors.New("creating a host sandbox: layers must be directories")
		}
		if err := overlay.CopyLayer(cfg.Layers[0].Dir, s.workdir); err != nil {
			return nil, fmt.Errorf("creating a host sandbox: restoring layer %s: %w", cfg.Layers[0].Dir, err)
		}
	}
	h := limits.ThisHost()
	if r.Host != nil {
		h = *r.Host
	}
	var note string
	if s.cgroups, note, err = limits.Detect(cfg.Limits.Cgroup, h); err != nil {
		return nil, fmt.Errorf("creating a host sandbox: %w", err)
	}
	s.rlimits = limits.PlanRlimits(cfg.Limits, !s.cgroups.HasMemory())
	s.report = sandbox.Report{Rung: sandbox.RungHost, Isolation: sandbox.LevelNone, Network: "host (not restricted)",
		Limits: s.cgroups.Plan(cfg.Limits),
		Notes: []string{
			"NO ISOLATION: commands run on the host as uid " + strconv.Itoa(os.Geteuid()) + " and can read, write, signal and connect to anything that user can",
			"workdir is the host directory " + s.workdir + " (file operations and command workdirs under the configured workdir " + cfg.Workdir + " map there; commands that name it in their arguments reach the host's own)",
			"file operations are the host's: absolute paths and symlinks reach any host file this user can (only FIFOs and other special files are refused, and reads capped)",
			"root of the host rung is the engine's own uid: no user namespace, no capability limits beyond the user's; a command or service naming another user is refused",
			"a service (StartService) runs in a process group (and, with cgroups, a cgroup) of its own, killed when its first process exits or at Close",
			note,
		}}
	for _, rl := range s.rlimits.Outer {
		s.report.Limits = append(s.report.Limits, rl.Describe())
	}
	if os.Geteuid() != 0 {
		s.report.Limits = append(s.report.Limits, limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc}.Describe()+" (counts all of this user's processes)")
	}
	return s, nil
}

// path maps a sandbox path to the host: relative paths and paths under the
// configured workdir land in the host workdir, so the engine's own files
// (checker files, setup files, the diff capture) never write to the host's
// real /workspace; other absolute paths are the host's own.
func (s *Sandbox) path(p string) string {
	if !filepath.IsAbs(p) {
		return filepath.Join(s.workdir, p)
	}
	p = filepath.Clean(p)
	if w := s.cfg.Workdir; w != "" && filepath.IsAbs(w) && filepath.Clean(w) != "/" {
		w = filepath.Clean(w)
		if p == w {
			return s.workdir
		}
		if rel, ok := strings.CutPrefix(p, w+"/"); ok {
			return filepath.Join(s.workdir, rel)
		}
	}
	return p
}

// Exec runs argv on the host in its own process group.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if len(req.Argv) == 0 {
		return sandbox.ExecResult{}, errors.New("exec: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return sandbox.ExecResult{}, err
	}
	defer s.life.End()
	if err := checkUser(req.User); err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	var cg *limits.Cgroup
	var err error
	if s.cgroups != nil {
		if cg, err = s.cgroups.New(fmt.Sprintf("evalsi-host-%s-%d", s.id, s.seq.Add(1)), s.cfg.Limits); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		defer cg.Remove()
	}
	cmd, err := s.command(req, cg)
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	// Pipes we own: a leftover process holding them open must not keep
	// Exec waiting once the command has ended.
	outR, outW, err := os.Pipe()
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return sandbox.ExecResult{}, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	limit := sandbox.OutputLimit(req)
	// Gives req.Output the pipes' output live; stopped before Exec
	// returns, so the hook is never called after.
	out := sandbox.NewOutputStream(limit, req.Output)
	defer out.Stop()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	outW.Close()
	errW.Close()
	var copies sync.WaitGroup
	for _, p := range []struct {
		r *os.File
		w io.Writer
	}{{outR, out.Stdout()}, {errR, out.Stderr()}} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			io.Copy(p.w, p.r)
		}()
	}
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	pgid := cmd.Process.Pid
	killAll := func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		if cg != nil {
			cg.Kill()
		}
	}
	timeout := sandbox.CommandTimeout(s.cfg, req)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	var stopErr, waitErr error
	select {
	case waitErr = <-waitc:
	case <-timer.C:
		timedOut = true
		killAll()
		waitErr = <-waitc
	case <-ctx.Done():
		stopErr = fmt.Errorf("exec: %w", ctx.Err())
		killAll()
		waitErr = <-waitc
	case <-s.life.Done():
		stopErr = errors.New("exec: host sandbox closed while the command ran")
		killAll()
		waitErr = <-waitc
	}
	killAll() // what the command left running in its group or cgroup
	deadline := time.Now().Add(2 * time.Second)
	outR.SetReadDeadline(deadline)
	errR.SetReadDeadline(deadline)
	copies.Wait()
	outR.Close()
	errR.Close()

	stdout, stderr := out.Bytes()
	res := sandbox.ExecResult{Stdout: stdout, Stderr: stderr, Truncated: out.Truncated(),
		TimedOut: timedOut, Duration: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		} else {
			res.ExitCode = ee.ExitCode()
		}
	default:
		return res, fmt.Errorf("exec: %w", waitErr)
	}
	if timedOut {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("command exceeded its %s timeout and was killed", timeout)})
	}
	if cg != nil {
		if ev, err := cg.Events(); err == nil {
			if ev.OOMKills > 0 {
				res.Denials = append(res.Denials, sandbox.Denial{Kind: "oom", Detail: fmt.Sprintf("the OOM killer killed %d process(es) at the %d MB memory limit", ev.OOMKills, s.cfg.Limits.MemoryMB)})
			}
			if ev.PidsMax > 0 {
				res.Denials = append(res.Denials, sandbox.Denial{Kind: "pids", Detail: fmt.Sprintf("the process limit refused %d fork(s)", ev.PidsMax)})
			}
		}
	}
	if res.ExitCode == 128+int(syscall.SIGXFSZ) {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "fsize", Detail: "a file reached the file size limit (SIGXFSZ)"})
	}
	return res, stopErr
}

// command is req as the launcher runs it: in its own process group, with
// the cleared environment, the rlimits and cgroup.
func (s *Sandbox) command(req sandbox.ExecRequest, cg *limits.Cgroup) (*exec.Cmd, error) {
	env, err := sandbox.CommandEnv(s.cfg.Env, req.Env)
	if err != nil {
		return nil, err
	}
	dir := s.workdir
	if req.Workdir != "" {
		dir = s.path(req.Workdir)
	}
	var args []string
	if cg != nil {
		for _, f := range cg.ProcsFiles() {
			args = append(args, "--cgroup", f)
		}
	}
	for _, rl := range s.rlimits.Outer {
		args = append(args, "--rlimit", rl.String())
	}
	if os.Geteuid() != 0 {
		args = append(args, "--rlimit", limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc}.String())
	}
	args = append(args, "--")
	args = append(args, req.Argv...)
	cmd := exec.Command(s.helper, args...)
	cmd.Env = append([]string{reexec.Env + "=" + helperLaunch}, env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// File operations on the host rung are host file operations: paths and
// symlinks mean what they mean on the host (the report says so). They still
// refuse anything but regular files, so a FIFO the command left at a path
// cannot block the engine, and reads are capped.

// ReadFile reads a regular host file (relative paths are in the workdir),
// at most sandbox.MaxReadFile.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.life.Usable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	f, err := openRegular(s.path(p), unix.O_RDONLY)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, sandbox.MaxReadFile+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	if len(b) > sandbox.MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: p, Err: fmt.Errorf("it is larger than the %d MiB read cap", sandbox.MaxReadFile>>20)}
	}
	return b, nil
}

// WriteFile writes a regular host file, creating parent directories.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.life.Usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	full := s.path(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	f, err := openRegular(full, unix.O_WRONLY|unix.O_TRUNC)
	if errors.Is(err, fs.ErrNotExist) {
		var fd int
		fd, err = unix.Open(full, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(mode.Perm()))
		f = os.NewFile(uintptr(fd), full)
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	return f.Close()
}

// openRegular opens name for I/O only if it is a regular file: it is
// looked at through an O_PATH descriptor (which opens nothing, a FIFO
// included) and reopened through /proc/self/fd, the same inode.
func openRegular(name string, flags int) (*os.File, error) {
	pfd, err := unix.Open(name, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, sandbox.NotRegular(sandbox.FileKind(st.Mode))
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Report describes the (absent) isolation.
func (s *Sandbox) Report() sandbox.Report {
	r := s.report
	r.Limits = append([]string(nil), r.Limits...)
	r.Notes = append([]string(nil), r.Notes...)
	return r
}

// Snapshot moves the workdir out as a layer (a rename). Restoring copies it,
// so unlike bwrap's overlay the cost grows with its size.
func (s *Sandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	dest, err := s.life.Snapshot(s.state)
	if err != nil {
		return sandbox.Layer{}, err
	}
	if err := os.Rename(s.workdir, dest); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
	}
	return sandbox.Layer{Dir: dest}, nil
}

// Close kills running commands and removes the workdir; it is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.life.Close(s.cleanup)
}

func (s *Sandbox) cleanup() error {
	s.stopServices()
	if s.ownState {
		return os.RemoveAll(s.state)
	}
	if s.workdir != "" {
		return os.RemoveAll(s.workdir)
	}
	return nil
}

// launchMain: [--cgroup F]... [--rlimit R]... -- ARGV...; joins the cgroups,
// sets the rlimits and execs the command with the environment it was given
// (already cleared by Exec), looking it up on that environment's PATH.
func launchMain(args []string) int {
	var procs []string
	var rls []limits.Rlimit
	for len(args) >= 2 && args[0] != "--" {
		switch args[0] {
		case "--cgroup":
			procs = append(procs, args[1])
		case "--rlimit":
			rl, err := limits.ParseRlimit(args[1])
			if err != nil {
				fmt.Fprintln(os.Stderr, "evalsi host launcher:", err)
				return 125
			}
			rls = append(rls, rl)
		}
		args = args[2:]
	}
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "evalsi host launcher: no command")
		return 125
	}
	argv := args[1:]
	for _, f := range procs {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			fmt.Fprintln(os.Stderr, "evalsi host launcher: joining cgroup:", err)
			return 125
		}
	}
	for _, rl := range rls {
		if err := rl.Apply(); err != nil {
			fmt.Fprintln(os.Stderr, "evalsi host launcher:", err)
			return 125
		}
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: command not found\n", argv[0])
		return 127
	}
	err = syscall.Exec(bin, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: %v\n", strings.Join(argv, " "), err)
	return 126
}

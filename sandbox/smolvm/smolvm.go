// Package smolvm is the smolvm rung: every command runs in its own libkrun
// microVM (a guest kernel under KVM; isolation level vm), started with the
// smolvm CLI (github.com/smol-machines/smolvm):
//
//	smolvm machine run --image <root> [--net] -v <workdir>:<wd> -v <io>:/run/evalsi
//	    -w <dir> [--cpus N] [--mem MiB] --timeout <d> -- /bin/sh /run/evalsi/<n>.sh argv…
//
// How a sandbox is laid out:
//   - The root is the image's unpacked root (with any layers) under a
//     private overlay (package overlay) in the sandbox's state dir, given to
//     smolvm as an unpacked rootfs directory: whatever smolvm does with the
//     directory, the shared image cache is never written. Without an image
//     the root is a skeleton whose /usr and /etc are the host's, mounted
//     read-only (as the other rungs use the host's system directories).
//   - The workdir is a host directory in the state dir shared into every VM
//     (virtiofs). It is the only state that persists between commands: each
//     command boots a fresh, ephemeral VM, so writes elsewhere are private to
//     that command and discarded with it, and processes a command leaves
//     behind die with its VM.
//   - A second shared directory, /run/evalsi, carries each command's
//     wrapper, environment, stdin, stdout, stderr and exit status as files.
//     The environment goes in a file rather than -e flags so that values
//     (secrets mapped with env_from) never appear in the host's process
//     table; stdin and the streams go through files so that the CLI's own
//     progress output never mixes with the command's.
//   - Network: off (smolvm's default) for deny; --net for allow. allowlist
//     is refused: smolvm filters egress by CIDR at boot (--allow-host), which
//     bypasses the engine's egress proxy and its policy events.
//   - ReadFile and WriteFile inside the workdir use the shared directory
//     through os.Root, so a symlink the guest plants cannot reach host
//     files; other paths are read by running cat in a VM, and cannot be
//     written (they would not outlive the command).
//
// Probe reports works=false, with the reason, unless the smolvm binary runs
// (smolvm --version) and /dev/kvm opens read-write. smolvm is not packaged
// by Debian (libkrun and libkrunfw are not either), so on the machines this
// is built on the rung is probed and never works. Nothing in this package
// has run against a real smolvm: the CLI surface follows smolvm v1.9.3's
// src/cli/machine.rs, and the conformance test is wired to run wherever
// smolvm and KVM exist. The first thing to check there: smolvm runs each
// VM under its own host uid, and the harbor/evalution integrations found
// that uid cannot traverse 0700 directories; the sandbox's state dir (where
// the shared workdir and io directories live) is 0700 by its creator.
package smolvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/overlay"
)

// Defaults of Options.
const (
	DefaultBinary = "smolvm"
	DefaultKVM    = "/dev/kvm"
	// DefaultBootGrace is added to a command's timeout for the host-side
	// deadline: the guest enforces the timeout itself (--timeout), and the
	// host kills the CLI only when the VM did not even come up.
	DefaultBootGrace = 60 * time.Second
)

// ioDir is where the per-command files are shared in the guest.
const ioDir = "/run/evalsi"

// Options configure the rung.
type Options struct {
	// Binary is the smolvm CLI (default "smolvm" on PATH).
	Binary string
	// KVM is the KVM device (default /dev/kvm).
	KVM string
	// BootGrace is added to the command timeout for the host-side deadline.
	BootGrace time.Duration
}

// Rung makes smolvm sandboxes.
type Rung struct {
	opts Options
}

// New returns the smolvm rung.
func New(opts Options) *Rung {
	if opts.Binary == "" {
		opts.Binary = DefaultBinary
	}
	if opts.KVM == "" {
		opts.KVM = DefaultKVM
	}
	if opts.BootGrace <= 0 {
		opts.BootGrace = DefaultBootGrace
	}
	return &Rung{opts: opts}
}

func (*Rung) Name() string             { return sandbox.RungSmolVM }
func (*Rung) Isolation() sandbox.Level { return sandbox.LevelVM }

// Probe checks that the smolvm CLI runs and that KVM is usable.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: sandbox.RungSmolVM, Isolation: sandbox.LevelVM}
	var why []string
	bin, err := exec.LookPath(r.opts.Binary)
	if err != nil {
		why = append(why, fmt.Sprintf("the smolvm CLI (%s) is not on PATH; it is not packaged by Debian: install it from https://github.com/smol-machines/smolvm releases", r.opts.Binary))
	} else {
		vctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		out, err := exec.CommandContext(vctx, bin, "--version").CombinedOutput()
		cancel()
		if err != nil {
			why = append(why, fmt.Sprintf("%s --version failed: %v: %s", bin, err, strings.TrimSpace(string(out))))
		}
	}
	if f, err := os.OpenFile(r.opts.KVM, os.O_RDWR, 0); err != nil {
		why = append(why, fmt.Sprintf("%s is not usable (%v): smolvm needs hardware virtualisation (KVM)", r.opts.KVM, err))
	} else {
		f.Close()
	}
	if len(why) > 0 {
		p.Reason = strings.Join(why, "; ")
		return p
	}
	p.Works = true
	return p
}

// Create prepares a sandbox. No VM runs until the first Exec.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	switch cfg.Policy.Network {
	case "", sandbox.NetworkDeny, sandbox.NetworkAllow:
	case sandbox.NetworkAllowlist:
		return nil, errors.New("smolvm rung: network: allowlist is not supported (smolvm filters egress by CIDR at boot, bypassing the egress proxy); use another rung or network: deny")
	default:
		return nil, fmt.Errorf("smolvm rung: unknown network policy %q", cfg.Policy.Network)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("smolvm rung: the config has no state dir")
	}
	if cfg.Workdir == "" {
		cfg.Workdir = sandbox.DefaultWorkdir
	}
	cfg.Workdir = path.Clean(cfg.Workdir)
	if !path.IsAbs(cfg.Workdir) {
		return nil, fmt.Errorf("smolvm rung: workdir %q must be absolute", cfg.Workdir)
	}
	s := &Sandbox{rung: r, cfg: cfg,
		work: filepath.Join(cfg.StateDir, "work"),
		io:   filepath.Join(cfg.StateDir, "io"),
	}
	for _, d := range []string{s.work, s.io} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("smolvm rung: creating %s: %w", d, err)
		}
	}
	if err := s.prepareRoot(); err != nil {
		s.Close(ctx)
		return nil, err
	}
	root, err := os.OpenRoot(s.work)
	if err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("smolvm rung: opening the workdir: %w", err)
	}
	s.workRoot = root
	return s, nil
}

// Sandbox is one smolvm sandbox.
type Sandbox struct {
	rung     *Rung
	cfg      sandbox.Config
	work, io string
	workRoot *os.Root
	image    string   // the --image directory
	volumes  []string // extra -v mounts (host system dirs)
	root     *overlay.Root
	notes    []string

	mu     sync.Mutex
	seq    int
	closed bool
}

// prepareRoot builds the directory smolvm boots as the image.
func (s *Sandbox) prepareRoot() error {
	var lowers []string
	for _, l := range s.cfg.Layers {
		if l.Dir == "" {
			return fmt.Errorf("smolvm rung: layer %q is not a directory layer", l.Ref)
		}
		lowers = append(lowers, l.Dir)
	}
	if s.cfg.Root != "" {
		lowers = append(lowers, s.cfg.Root)
	} else {
		skel, err := hostSkeleton(filepath.Join(s.cfg.StateDir, "skel"))
		if err != nil {
			return err
		}
		lowers = append(lowers, skel)
		s.volumes = []string{"/usr:/usr:ro", "/etc:/etc:ro"}
		s.notes = append(s.notes, "no image: the host's /usr and /etc are shared read-only into each VM")
	}
	rootState := filepath.Join(s.cfg.StateDir, "rootfs")
	if err := os.MkdirAll(rootState, 0o700); err != nil {
		return fmt.Errorf("smolvm rung: %w", err)
	}
	root, err := overlay.Mount(lowers, rootState)
	if err != nil {
		return fmt.Errorf("smolvm rung: %w", err)
	}
	s.root, s.image = root, root.Merged
	if n := root.Note(); n != "" {
		s.notes = append(s.notes, n)
	}
	return nil
}

// hostSkeleton makes a root whose system directories point into /usr
// (merged-/usr layout), for use with the host's /usr mounted over it.
func hostSkeleton(dir string) (string, error) {
	for _, d := range []string{"usr", "etc", "tmp", "proc", "sys", "dev", "run", "root", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", fmt.Errorf("smolvm rung: building the host skeleton root: %w", err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(dir, l)); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("smolvm rung: building the host skeleton root: %w", err)
		}
	}
	return dir, nil
}

// Report describes the isolation.
func (s *Sandbox) Report() sandbox.Report {
	rep := sandbox.Report{Rung: sandbox.RungSmolVM, Isolation: sandbox.LevelVM, Network: s.network()}
	rep.Notes = append([]string{"each command runs in a fresh microVM; only the workdir persists between commands"}, s.notes...)
	if s.cfg.ReadOnlyRoot {
		rep.Notes = append(rep.Notes, "read_only_root is not enforced: smolvm has no read-only root; writes outside the workdir are discarded with each command's VM")
	}
	if s.cfg.Limits.MemoryMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("memory %d MiB (VM size)", s.cfg.Limits.MemoryMB))
	}
	if s.cfg.Limits.CPUs > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("cpus %d (vCPUs)", vcpus(s.cfg.Limits.CPUs)))
	}
	if s.cfg.Limits.FileSizeMB > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("file size %d MiB (ulimit -f)", s.cfg.Limits.FileSizeMB))
	}
	return rep
}

func (s *Sandbox) network() string {
	if s.cfg.Policy.Network == sandbox.NetworkAllow {
		return sandbox.NetworkAllow
	}
	return sandbox.NetworkDeny
}

func vcpus(c float64) int {
	n := int(c)
	if float64(n) < c {
		n++
	}
	return max(n, 1)
}

// Close removes the sandbox's state. It is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.workRoot != nil {
		errs = append(errs, s.workRoot.Close())
	}
	if s.root != nil {
		errs = append(errs, s.root.Remove())
	}
	errs = append(errs, os.RemoveAll(s.cfg.StateDir))
	return errors.Join(errs...)
}

func (s *Sandbox) next() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("smolvm sandbox is closed")
	}
	s.seq++
	return s.seq, nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Exec runs argv in a fresh microVM.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if len(req.Argv) == 0 {
		return res, errors.New("smolvm exec: empty argv")
	}
	if u := req.User; u != "" && u != "root" && u != "0" && u != "0:0" && u != "root:root" {
		// Never a command run as someone else than asked.
		return res, fmt.Errorf("smolvm exec: commands run as the VM's root; user %q is not supported on this rung", u)
	}
	n, err := s.next()
	if err != nil {
		return res, err
	}
	envFile, err := envScript(s.cfg.Env, req.Env)
	if err != nil {
		return res, err
	}
	base := filepath.Join(s.io, strconv.Itoa(n))
	files := map[string]string{".env": envFile, ".in": string(req.Stdin), ".sh": s.wrapper(ioDir, n)}
	for ext, content := range files {
		if err := os.WriteFile(base+ext, []byte(content), 0o600); err != nil {
			return res, fmt.Errorf("smolvm exec: writing %s: %w", base+ext, err)
		}
	}
	defer func() {
		for _, ext := range []string{".env", ".in", ".sh", ".out", ".err", ".rc"} {
			os.Remove(base + ext)
		}
	}()

	timeout := sandbox.CommandTimeout(s.cfg, req)
	wd := s.cfg.Workdir
	if req.Workdir != "" {
		wd = sandbox.InSandboxPath(s.cfg.Workdir, req.Workdir)
	}
	args := []string{"machine", "run", "--image", s.image,
		"-v", s.work + ":" + s.cfg.Workdir, "-v", s.io + ":" + ioDir, "-w", wd,
		"--timeout", fmt.Sprintf("%dms", timeout.Milliseconds())}
	for _, v := range s.volumes {
		args = append(args, "-v", v)
	}
	if s.cfg.Policy.Network == sandbox.NetworkAllow {
		args = append(args, "--net")
	}
	if s.cfg.Limits.CPUs > 0 {
		args = append(args, "--cpus", strconv.Itoa(vcpus(s.cfg.Limits.CPUs)))
	}
	if s.cfg.Limits.MemoryMB > 0 {
		args = append(args, "--mem", strconv.Itoa(s.cfg.Limits.MemoryMB))
	}
	args = append(args, "--", "/bin/sh", path.Join(ioDir, strconv.Itoa(n)+".sh"))
	args = append(args, req.Argv...)

	hctx, cancel := context.WithTimeout(ctx, timeout+s.rung.opts.BootGrace)
	defer cancel()
	cmd := exec.CommandContext(hctx, s.rung.opts.Binary, args...)
	// The CLI gets the engine's PATH and HOME only (to find its own data
	// directory), never the rest of the engine's environment.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cliOut := sandbox.NewCappedBuffer(16 << 10)
	cmd.Stdout, cmd.Stderr = cliOut, cliOut

	start := time.Now()
	runErr := cmd.Run()
	res.Duration = time.Since(start)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	limit := sandbox.OutputLimit(req)
	var t1, t2 bool
	res.Stdout, t1 = readCapped(base+".out", limit)
	res.Stderr, t2 = readCapped(base+".err", limit)
	res.Truncated = t1 || t2
	rc, rcErr := os.ReadFile(base + ".rc")
	switch {
	case rcErr == nil:
		code, err := strconv.Atoi(strings.TrimSpace(string(rc)))
		if err != nil {
			return res, fmt.Errorf("smolvm exec: reading the exit status %q: %w", rc, err)
		}
		res.ExitCode = code
	case hctx.Err() != nil || res.Duration >= timeout:
		// The guest's --timeout or the host deadline stopped the command
		// before the wrapper could record its status.
		res.TimedOut, res.ExitCode = true, -1
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("killed after %s", timeout)})
	default:
		return res, fmt.Errorf("smolvm machine run failed (the command did not run): %v: %s", runErr, strings.TrimSpace(string(cliOut.Bytes())))
	}
	if s.cfg.Limits.FileSizeMB > 0 && res.ExitCode == 128+int(syscall.SIGXFSZ) {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "fsize", Detail: fmt.Sprintf("a file reached %d MiB", s.cfg.Limits.FileSizeMB)})
	}
	return res, nil
}

// envScript is the command's whole environment as a shell script of
// exports (sandbox.CommandEnv: default PATH, then the config's, then the
// request's).
func envScript(cfgEnv, reqEnv map[string]string) (string, error) {
	env, err := sandbox.CommandEnv(cfgEnv, reqEnv)
	if err != nil {
		return "", fmt.Errorf("smolvm exec: %w", err)
	}
	var b strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !envName.MatchString(k) {
			return "", fmt.Errorf("smolvm exec: environment variable name %q cannot be passed to the guest shell (use letters, digits and _)", k)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	return b.String(), nil
}

// wrapper is the guest-side script of command n, whose files are in dir:
// it drops the environment the guest started with, loads the command's,
// applies the file size limit, runs argv with its stdin and output as
// files, and records the exit status.
func (s *Sandbox) wrapper(dir string, n int) string {
	p := func(ext string) string { return shellQuote(path.Join(dir, strconv.Itoa(n)+ext)) }
	var b strings.Builder
	b.WriteString("for v in $(env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'); do unset \"$v\" 2>/dev/null; done\n")
	fmt.Fprintf(&b, ". %s\n", p(".env"))
	if s.cfg.Limits.FileSizeMB > 0 {
		fmt.Fprintf(&b, "ulimit -f %d\n", s.cfg.Limits.FileSizeMB*1024)
	}
	fmt.Fprintf(&b, "\"$@\" <%s >%s 2>%s\n", p(".in"), p(".out"), p(".err"))
	fmt.Fprintf(&b, "echo $? >%s\n", p(".rc"))
	return b.String()
}

// readCapped reads at most limit bytes of a file and reports whether it
// was longer. A missing file reads as empty.
func readCapped(name string, limit int) ([]byte, bool) {
	f, err := os.Open(name)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	buf := make([]byte, limit+1)
	n, _ := io.ReadFull(f, buf)
	if n > limit {
		return buf[:limit], true
	}
	return buf[:n], false
}

// inWorkdir returns p relative to the workdir when it lies inside it.
func (s *Sandbox) inWorkdir(p string) (string, bool) {
	abs := sandbox.InSandboxPath(s.cfg.Workdir, p)
	if abs == s.cfg.Workdir {
		return ".", true
	}
	rel, ok := strings.CutPrefix(abs, s.cfg.Workdir+"/")
	return rel, ok
}

// ReadFile reads a file: from the shared workdir when it is inside it,
// else by running cat in a VM.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if rel, ok := s.inWorkdir(p); ok {
		b, err := s.workRoot.ReadFile(rel)
		if err != nil {
			return nil, fmt.Errorf("smolvm sandbox: reading %s: %w", p, err)
		}
		return b, nil
	}
	abs := sandbox.InSandboxPath(s.cfg.Workdir, p)
	res, err := s.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `test -e "$1" || exit 44; exec cat -- "$1"`, "sh", abs}, OutputLimit: 64 << 20})
	if err != nil {
		return nil, fmt.Errorf("smolvm sandbox: reading %s: %w", abs, err)
	}
	switch res.ExitCode {
	case 0:
		return res.Stdout, nil
	case 44:
		return nil, fmt.Errorf("smolvm sandbox: reading %s: %w", abs, fs.ErrNotExist)
	}
	return nil, fmt.Errorf("smolvm sandbox: reading %s: cat exited %d: %s", abs, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
}

// WriteFile writes a file in the shared workdir. Paths outside it are
// refused: the next command's VM would not see them.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	rel, ok := s.inWorkdir(p)
	if !ok {
		return fmt.Errorf("smolvm sandbox: writing %s: only files under the workdir %s persist between commands on the smolvm rung", p, s.cfg.Workdir)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := s.workRoot.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("smolvm sandbox: writing %s: %w", p, err)
		}
	}
	if err := s.workRoot.WriteFile(rel, data, mode); err != nil {
		return fmt.Errorf("smolvm sandbox: writing %s: %w", p, err)
	}
	// WriteFile keeps an existing file's mode; the caller asked for mode.
	if err := s.workRoot.Chmod(rel, mode); err != nil {
		return fmt.Errorf("smolvm sandbox: writing %s: %w", p, err)
	}
	return nil
}

// StartService is not offered yet by this rung: no process outlives the
// command that started it.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	return nil, fmt.Errorf("starting a service: %w on this rung", errors.ErrUnsupported)
}

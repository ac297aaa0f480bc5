package landlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
)

// Name is the rung's name in the ladder.
const Name = "landlock"

// maxABI is the newest Landlock ABI whose rules this rung uses.
const maxABI = 7

// DefaultCommandTimeout applies when neither the request nor the config sets one.
const DefaultCommandTimeout = 10 * time.Minute

// Rung makes Landlock sandboxes.
type Rung struct{}

// New returns the landlock rung.
func New() *Rung { return &Rung{} }

func (*Rung) Name() string             { return Name }
func (*Rung) Isolation() sandbox.Level { return sandbox.LevelProcess }

// ABI returns the kernel's Landlock ABI version, or an error saying why
// Landlock is unusable.
func ABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION): %w (kernel without Landlock, or not in the lsm= list)", err)
	}
	if v < 1 {
		return 0, errors.New("landlock reports ABI version 0")
	}
	return v, nil
}

// Probe checks the Landlock ABI and that a private mount namespace can be
// made (directly as root, or in a user namespace).
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: Name, Isolation: sandbox.LevelProcess}
	abi, err := ABI()
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	if abi < 4 {
		p.Reason = fmt.Sprintf("landlock ABI %d has no TCP rules (need 4, Linux 6.7)", abi)
		return p
	}
	if _, err := reexecSelf(); err != nil {
		p.Reason = err.Error()
		return p
	}
	if os.Geteuid() != 0 {
		if err := probeUserNS(ctx); err != nil {
			p.Reason = "not root and cannot create a user namespace for the private mount namespace: " + err.Error()
			return p
		}
	}
	p.Works = true
	p.Reason = fmt.Sprintf("landlock ABI %d", abi)
	return p
}

// Create prepares the sandbox's state directory; nothing runs until Exec.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	abi, err := ABI()
	if err != nil {
		return nil, fmt.Errorf("creating landlock sandbox: %w", err)
	}
	if cfg.Workdir == "" || !filepath.IsAbs(cfg.Workdir) || filepath.Clean(cfg.Workdir) == "/" {
		return nil, fmt.Errorf("creating landlock sandbox: workdir %q must be an absolute path below /", cfg.Workdir)
	}
	cfg.Workdir = filepath.Clean(cfg.Workdir)
	if reserved(cfg.Workdir) {
		return nil, fmt.Errorf("creating landlock sandbox: workdir %q is inside /proc, /dev or /tmp, which the sandbox mounts itself", cfg.Workdir)
	}
	if cfg.Image != "" && cfg.Root == "" {
		return nil, fmt.Errorf("creating landlock sandbox: image %q given without an unpacked root (Config.Root); the landlock rung runs unpacked roots only", cfg.Image)
	}
	for _, l := range cfg.Layers {
		if l.Dir == "" {
			return nil, fmt.Errorf("creating landlock sandbox: layer %q is not a directory layer (landlock cannot use rung references such as image IDs)", l.Ref)
		}
	}
	net := cfg.Policy.Network
	if net == "" {
		net = sandbox.NetworkDeny
	}
	var proxyPort uint16
	switch net {
	case sandbox.NetworkDeny, sandbox.NetworkAllow:
	case sandbox.NetworkAllowlist:
		proxyPort, err = tcpProxyPort(cfg.Policy.ProxyAddr)
		if err != nil {
			return nil, fmt.Errorf("creating landlock sandbox: %w", err)
		}
	default:
		return nil, fmt.Errorf("creating landlock sandbox: unknown network mode %q (deny, allowlist or allow)", net)
	}
	cfg.Policy.Network = net
	if abi < 4 && net != sandbox.NetworkAllow {
		return nil, fmt.Errorf("creating landlock sandbox: landlock ABI %d cannot restrict TCP (network %s needs ABI 4)", abi, net)
	}

	cgs, cgNote, err := limits.Detect(cfg.Limits.Cgroup, limits.ThisHost())
	if err != nil {
		return nil, fmt.Errorf("creating landlock sandbox: cgroup %q: %w", cfg.Limits.Cgroup, err)
	}
	s := &Sandbox{cfg: cfg, abi: min(abi, maxABI), proxyPort: proxyPort, cgroups: cgs, cgroupNote: cgNote}
	if s.state, s.ownState, err = sandbox.StateDir(cfg.StateDir, "landlock"); err != nil {
		return nil, err
	}
	if err := s.prepare(); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("creating landlock sandbox in %s: %w", s.state, err)
	}
	return s, nil
}

func reserved(p string) bool {
	for _, r := range []string{"/proc", "/dev", "/tmp"} {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// tcpProxyPort checks the proxy address is TCP on loopback and returns its
// port: Landlock rules name ports only, so the proxy must be the only thing
// on that port that matters.
func tcpProxyPort(addr string) (uint16, error) {
	if addr == "" {
		return 0, errors.New("network allowlist needs the egress proxy address (Policy.ProxyAddr)")
	}
	if strings.HasPrefix(addr, "unix:") {
		return 0, fmt.Errorf("egress proxy %q is a unix socket; the landlock rung shares the host network and needs a TCP proxy on loopback (host:port)", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("egress proxy address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, fmt.Errorf("egress proxy %q must listen on loopback for the landlock rung", addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("egress proxy address %q: bad port", addr)
	}
	return uint16(p), nil
}

// Sandbox is one landlock sandbox.
type Sandbox struct {
	cfg       sandbox.Config
	abi       int
	proxyPort uint16
	state     string
	ownState  bool
	// cgroups makes a cgroup per command (nil: none usable, see cgroupNote).
	cgroups    *limits.Cgroups
	cgroupNote string

	// execMu runs commands one at a time: each launcher mounts the same
	// overlay upper directory in its own mount namespace, and overlayfs
	// refuses (EINVAL/EBUSY) or misbehaves when one upper directory is in
	// use by two mounts at once.
	execMu sync.Mutex

	mu          sync.Mutex
	execs       int
	closed      bool
	snapshotted bool
	snapshots   int
}

var _ sandbox.Snapshotter = (*Sandbox)(nil)

func (s *Sandbox) workDir() string  { return filepath.Join(s.state, "work") }
func (s *Sandbox) tmpDir() string   { return filepath.Join(s.state, "tmp") }
func (s *Sandbox) rootDir() string  { return filepath.Join(s.state, "root") }
func (s *Sandbox) upperDir() string { return filepath.Join(s.state, "upper") }
func (s *Sandbox) ovlWork() string  { return filepath.Join(s.state, "ovlwork") }
func (s *Sandbox) baseDir() string  { return filepath.Join(s.state, "base") }
func (s *Sandbox) hasImage() bool   { return s.cfg.Root != "" }

// prepare makes the state directories and fills the workdir from the
// layers' copies of it (a bound workdir hides what the layers hold there).
func (s *Sandbox) prepare() error {
	dirs := []string{s.workDir(), s.tmpDir(), s.rootDir(), s.upperDir(), s.ovlWork(), s.baseDir()}
	if s.hasImage() {
		if fi, err := os.Stat(s.cfg.Root); err != nil || !fi.IsDir() {
			return fmt.Errorf("image root %q is not a directory", s.cfg.Root)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// /tmp is world-writable and sticky, as programs expect.
	if err := os.Chmod(s.tmpDir(), 0o1777); err != nil {
		return err
	}
	// Lowest first, so upper layers overwrite.
	var sources []string
	if s.hasImage() {
		sources = append(sources, s.cfg.Root)
	}
	for i := len(s.cfg.Layers) - 1; i >= 0; i-- {
		sources = append(sources, s.cfg.Layers[i].Dir)
	}
	for _, src := range sources {
		from := filepath.Join(src, s.cfg.Workdir)
		if _, err := os.Lstat(from); err != nil {
			continue
		}
		if err := copyTree(from, s.workDir()); err != nil {
			return fmt.Errorf("copying workdir from layer %s: %w", src, err)
		}
	}
	return nil
}

// Report describes the isolation that applies.
func (s *Sandbox) Report() sandbox.Report {
	rep := sandbox.Report{
		Rung:      Name,
		Isolation: sandbox.LevelProcess,
		Network:   s.cfg.Policy.Network,
	}
	if s.cfg.Policy.Network == sandbox.NetworkAllowlist {
		rep.ProxyAddr = s.cfg.Policy.ProxyAddr
	}
	rep.Limits = append(rep.Limits, s.cgroups.Plan(s.cfg.Limits)...)
	if mb := s.cfg.Limits.MemoryMB; mb > 0 && !s.memoryByCgroup() {
		rep.Limits = append(rep.Limits, fmt.Sprintf("rlimit AS %d MiB", mb))
	}
	if mb := s.cfg.Limits.FileSizeMB; mb > 0 {
		rep.Limits = append(rep.Limits, fmt.Sprintf("rlimit FSIZE %d MiB", mb))
	}
	if s.cgroupNote != "" {
		rep.Notes = append(rep.Notes, s.cgroupNote)
	}
	rep.Limits = append(rep.Limits, fmt.Sprintf("landlock ABI %d filesystem rules", s.abi))
	switch s.cfg.Policy.Network {
	case sandbox.NetworkDeny:
		rep.Limits = append(rep.Limits, "landlock TCP bind/connect denied", "seccomp: UDP, raw, MPTCP sockets denied")
	case sandbox.NetworkAllowlist:
		rep.Limits = append(rep.Limits, fmt.Sprintf("landlock TCP connect only to port %d", s.proxyPort), "seccomp: UDP, raw, MPTCP sockets denied")
	}
	if s.cgroups == nil {
		rep.Notes = append(rep.Notes, "no process cap: no usable cgroup, and RLIMIT_NPROC would count the whole uid")
		if s.cfg.Limits.PidsMax > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pids_max %d requested but not enforced", s.cfg.Limits.PidsMax))
		}
		if s.cfg.Limits.CPUs > 0 {
			rep.Notes = append(rep.Notes, "cpus limit requested but not enforced")
		}
	}
	rep.Notes = append(rep.Notes,
		"all capabilities dropped; host network namespace shared; no PID namespace",
		"leftover processes killed by a subreaper launcher when each command ends")
	if s.cfg.User != "" {
		rep.Notes = append(rep.Notes, fmt.Sprintf("user %q requested; commands run as uid 0 without capabilities", s.cfg.User))
	}
	if !s.hasImage() {
		rep.Notes = append(rep.Notes, "host system directories bound read-only; the rest of the root is a private overlay")
	}
	return rep
}

// Close removes the sandbox's state (snapshots excepted). Nothing runs
// between Execs, so there is nothing to kill.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.ownState && s.snapshots == 0 {
		return removeAll(s.state)
	}
	var errs []error
	for _, d := range []string{s.workDir(), s.tmpDir(), s.rootDir(), s.upperDir(), s.ovlWork(), s.baseDir()} {
		errs = append(errs, removeAll(d))
	}
	return errors.Join(errs...)
}

// removeAll removes a tree, first making directories writable (overlay work
// directories hold a root-only "work" dir).
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

func (s *Sandbox) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("landlock sandbox is closed")
	}
	if s.snapshotted {
		return errors.New("landlock sandbox was snapshotted; create a new one from the layer")
	}
	return nil
}

// Snapshot turns the sandbox's changes into a layer under
// StateDir/snapshots: the overlay upper directory (image case) plus a copy
// of the workdir at its path. The sandbox must be closed afterwards.
func (s *Sandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	if err := s.usable(); err != nil {
		return sandbox.Layer{}, err
	}
	s.mu.Lock()
	s.snapshots++
	n := s.snapshots
	s.snapshotted = true
	s.mu.Unlock()
	layer := filepath.Join(s.state, "snapshots", strconv.Itoa(n))
	if err := os.MkdirAll(filepath.Dir(layer), 0o755); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: %w", err)
	}
	// The upper directory already is a layer in overlay's format
	// (whiteouts, opaque directories); moving it costs nothing.
	if err := os.Rename(s.upperDir(), layer); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: moving upper dir: %w", err)
	}
	wd := filepath.Join(layer, s.cfg.Workdir)
	if err := removeAll(wd); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: %w", err)
	}
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: %w", err)
	}
	if err := copyTree(s.workDir(), wd); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: copying workdir: %w", err)
	}
	return sandbox.Layer{Dir: layer}, nil
}

// memoryByCgroup says whether MemoryMB is enforced by a memory cgroup
// (a real OOM kill) rather than RLIMIT_AS.
func (s *Sandbox) memoryByCgroup() bool { return s.cgroups != nil && s.cgroups.HasMemory() }

// exitStatus converts a wait status to a shell-style exit code.
func exitStatus(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}

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
	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/bridge"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/userns"
)

// Name is the rung's name in the ladder.
const Name = "landlock"

// maxABI is the newest Landlock ABI whose rules this rung uses.
const maxABI = 7

// DefaultCommandTimeout applies when neither the request nor the config sets one.
const DefaultCommandTimeout = 10 * time.Minute

// Rung makes Landlock sandboxes.
type Rung struct {
	// ns is a user namespace with the engine's map, for idmapped mounts
	// (engine as root), made once: making one starts a process.
	mu     sync.Mutex
	ns     *os.File
	nsDesc string
}

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
	if _, err := reexecSelf(); err != nil {
		p.Reason = err.Error()
		return p
	}
	m, note, err := userns.ForEngine()
	if err != nil {
		p.Reason = "choosing the sandbox's user namespace map: " + err.Error()
		return p
	}
	if err := probeUserNS(ctx, m); err != nil {
		p.Reason = "cannot start the launcher in its user, mount, PID and network namespaces: " + err.Error()
		return p
	}
	if os.Geteuid() == 0 {
		// Images and state are idmapped mounts: check the kernel and the
		// temporary directory's filesystem allow them.
		ns, err := r.idmapNamespace(m)
		if err == nil {
			var fd int
			if fd, err = idmappedClone(os.TempDir(), ns, true); err == nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			p.Reason = "idmapped mounts unavailable: " + err.Error()
			return p
		}
	}
	p.Works = true
	p.Reason = fmt.Sprintf("landlock ABI %d; %s", abi, note)
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
	switch net {
	case sandbox.NetworkDeny:
	case sandbox.NetworkAllowlist, sandbox.NetworkAllow:
		// The sandbox has a network namespace of its own: its only way
		// out is the egress proxy (allow: the engine's allow-all one).
		if cfg.Policy.ProxyAddr == "" {
			return nil, fmt.Errorf("creating landlock sandbox: network %s needs the egress proxy's address (Policy.ProxyAddr: unix:/path or host:port); the landlock rung never shares the host's network", net)
		}
	default:
		return nil, fmt.Errorf("creating landlock sandbox: unknown network mode %q (deny, allowlist or allow)", net)
	}
	cfg.Policy.Network = net

	cgs, cgNote, err := limits.Detect(cfg.Limits.Cgroup, limits.ThisHost())
	if err != nil {
		return nil, fmt.Errorf("creating landlock sandbox: cgroup %q: %w", cfg.Limits.Cgroup, err)
	}
	s := &Sandbox{cfg: cfg, abi: min(abi, maxABI), cgroups: cgs, cgroupNote: cgNote}
	if s.idmap, s.idNote, err = userns.ForEngine(); err != nil {
		return nil, fmt.Errorf("creating landlock sandbox: choosing its user namespace map: %w", err)
	}
	if s.state, s.ownState, err = sandbox.StateDir(cfg.StateDir, "landlock"); err != nil {
		return nil, err
	}
	if mb := cfg.Limits.DiskMB; mb > 0 && os.Geteuid() == 0 {
		// The writable layer, workdir and /tmp live on a tmpfs of that size.
		if s.disk, err = limits.MountDisk(filepath.Join(s.state, "disk"), mb, 0, 0); err != nil {
			s.Close(ctx)
			return nil, fmt.Errorf("creating landlock sandbox: %w", err)
		}
	}
	if err := s.prepare(); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("creating landlock sandbox in %s: %w", s.state, err)
	}
	if err := s.prepareNamespaces(r); err != nil {
		s.Close(ctx)
		return nil, fmt.Errorf("creating landlock sandbox: %w", err)
	}
	return s, nil
}

// prepareNamespaces makes what every launcher shares: the user namespace
// its mounts are idmapped with (engine as root) and the egress relay.
func (s *Sandbox) prepareNamespaces(r *Rung) error {
	if os.Geteuid() == 0 {
		var err error
		if s.nsFile, err = r.idmapNamespace(s.idmap); err != nil {
			return err
		}
	}
	if s.cfg.Policy.Network == sandbox.NetworkDeny {
		return nil
	}
	_, port, _ := net.SplitHostPort(bridge.Listen)
	p, _ := strconv.ParseUint(port, 10, 16)
	s.proxyPort = uint16(p)
	// Its own short directory: socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "evalsi-landlock-proxy-")
	if err != nil {
		return fmt.Errorf("making the egress relay's directory: %w", err)
	}
	s.relaySock = filepath.Join(dir, "proxy.sock")
	if s.relay, err = bridge.Relay(s.cfg.Policy.ProxyAddr, s.relaySock); err != nil {
		os.RemoveAll(dir)
		s.relaySock = ""
		return err
	}
	return nil
}

func reserved(p string) bool {
	for _, r := range []string{"/proc", "/dev", "/tmp"} {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// idmapNamespace returns the rung's user namespace with map m (it stays
// open for the rung's life; sandboxes do not close it).
func (r *Rung) idmapNamespace(m userns.IDMap) (*os.File, error) {
	desc := strings.Join(m.Describe(), ";") + "|" + fmt.Sprint(m.GID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ns != nil && r.nsDesc == desc {
		return r.ns, nil
	}
	ns, err := m.Namespace(selfExe)
	if err != nil {
		return nil, err
	}
	// A changed map (/etc/subuid edited): the old namespace stays open for
	// the sandboxes that use it.
	r.ns, r.nsDesc = ns, desc
	return ns, nil
}

// Sandbox is one landlock sandbox.
type Sandbox struct {
	cfg      sandbox.Config
	abi      int
	state    string
	ownState bool
	// idmap is the launcher's user namespace map; nsFile a namespace with
	// it for idmapped mounts (engine as root; the rung's), nil otherwise.
	idmap  userns.IDMap
	idNote string
	nsFile *os.File
	// relay is the host end of the egress proxy (allowlist, allow): a unix
	// socket relaySock, which the launcher forwards 127.0.0.1:proxyPort to.
	relay     net.Listener
	relaySock string
	proxyPort uint16
	// disk bounds the writable state (Limits.DiskMB; engine as root).
	disk *limits.Disk
	// cgroups makes a cgroup per command (nil: none usable, see cgroupNote).
	cgroups    *limits.Cgroups
	cgroupNote string

	// execMu runs commands one at a time: each launcher mounts the same
	// overlay upper directory in its own mount namespace, and overlayfs
	// refuses (EINVAL/EBUSY) or misbehaves when one upper directory is in
	// use by two mounts at once.
	execMu sync.Mutex

	// hostname is the sandbox's (also in etcDir's files).
	hostname string

	// holdMu guards the holder (holder.go), started at the first
	// command, and the services it runs.
	holdMu   sync.Mutex
	holder   *holder
	services []*service

	mu          sync.Mutex
	execs       int
	closed      bool
	snapshotted bool
	snapshots   int
}

var _ sandbox.Snapshotter = (*Sandbox)(nil)

// writable holds what the sandbox writes: the disk_mb tmpfs, if any.
func (s *Sandbox) writable() string {
	if s.disk != nil {
		return s.disk.Dir
	}
	return s.state
}

func (s *Sandbox) workDir() string  { return filepath.Join(s.writable(), "work") }
func (s *Sandbox) tmpDir() string   { return filepath.Join(s.writable(), "tmp") }
func (s *Sandbox) rootDir() string  { return filepath.Join(s.state, "root") }
func (s *Sandbox) upperDir() string { return filepath.Join(s.writable(), "upper") }
func (s *Sandbox) ovlWork() string  { return filepath.Join(s.writable(), "ovlwork") }
func (s *Sandbox) baseDir() string  { return filepath.Join(s.state, "base") }
func (s *Sandbox) etcDir() string   { return filepath.Join(s.writable(), "etc") }
func (s *Sandbox) hasImage() bool   { return s.cfg.Root != "" }

// prepare makes the state directories and fills the workdir from the
// layers' copies of it (a bound workdir hides what the layers hold there).
func (s *Sandbox) prepare() error {
	dirs := []string{s.workDir(), s.tmpDir(), s.rootDir(), s.upperDir(), s.ovlWork(), s.baseDir()}
	var err error
	if s.hostname, err = writeEtcFiles(s.etcDir()); err != nil {
		return err
	}
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
		UIDMap:    s.idmap.Describe(),
	}
	if s.relay != nil {
		rep.ProxyAddr = s.cfg.Policy.ProxyAddr
	}
	if s.cfg.User == "" {
		rep.Capabilities = append([]string(nil), sandbox.ContainerCapabilities...)
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
		rep.Limits = append(rep.Limits, "network namespace with only loopback", "seccomp: UDP, raw, MPTCP sockets denied; TCP connects beyond loopback refused and recorded")
	case sandbox.NetworkAllowlist:
		rep.Limits = append(rep.Limits, "network namespace with only loopback and the forwarded egress proxy",
			"seccomp: UDP, raw, MPTCP sockets denied; TCP connects beyond loopback refused and recorded")
	case sandbox.NetworkAllow:
		rep.Limits = append(rep.Limits, "network namespace with only loopback and the forwarded egress proxy")
	}
	if s.relay != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: HTTP(S)_PROXY=http://%s, forwarded by the launcher to the egress proxy; nothing else leaves the sandbox's network namespace", s.cfg.Policy.Network, bridge.Listen))
	}
	if s.disk != nil {
		rep.Limits = append(rep.Limits, s.disk.Describe()+" (tmpfs holding the writable layer, workdir and /tmp; counts as memory of the writer)")
	} else if mb := s.cfg.Limits.DiskMB; mb > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("disk_mb %d requested but not enforced: the engine is not root (file_size_mb caps each file)", mb))
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
	rep.Notes = append(rep.Notes, s.idNote)
	if s.nsFile != nil {
		rep.Notes = append(rep.Notes, "image, layers and sandbox state are idmapped mounts: stored unshifted, owned by the mapped ids inside")
	}
	rep.Notes = append(rep.Notes,
		"own user, mount, network, IPC and UTS namespaces held by the sandbox's init; each command and service in a PID namespace of its own; /proc read-only with Docker's masked paths hidden; no /sys",
		"Landlock and seccomp (ptrace, io_uring; socket families) apply on top of the capabilities",
		"a command's leftover processes die with its launcher, init of its PID namespace, when it ends; services run until they exit or the sandbox closes",
		"hostname "+s.hostname+"; /etc/hostname, /etc/hosts and /etc/resolv.conf are the sandbox's own, as Docker writes them")
	if s.cfg.User != "" {
		rep.Notes = append(rep.Notes, fmt.Sprintf("user %q requested; commands run as uid 0 without capabilities", s.cfg.User))
	}
	if !s.hasImage() {
		rep.Notes = append(rep.Notes, "host system directories bound read-only; the rest of the root is a private overlay")
	}
	return rep
}

// Close kills the holder, and with it every service and anything else
// left, and removes the sandbox's state (snapshots excepted).
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopHolder()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.disk != nil {
		errs = append(errs, s.disk.Unmount())
	}
	if s.relay != nil {
		s.relay.Close()
		errs = append(errs, os.RemoveAll(filepath.Dir(s.relaySock)))
	}
	if s.ownState && s.snapshots == 0 {
		errs = append(errs, removeAll(s.state))
		return errors.Join(errs...)
	}
	for _, d := range []string{s.workDir(), s.tmpDir(), s.rootDir(), s.upperDir(), s.ovlWork(), s.baseDir(), s.etcDir()} {
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
	if s.disk != nil {
		return sandbox.Layer{}, errors.New("snapshotting landlock sandbox: a sandbox with disk_mb keeps its changes on a tmpfs and cannot be snapshotted")
	}
	s.mu.Lock()
	s.snapshots++
	n := s.snapshots
	s.snapshotted = true
	s.mu.Unlock()
	// The holder has the overlay mounted; it (and any service) ends
	// here, as the sandbox may only be closed afterwards. Mount points it
	// created for the /etc files are not the sandbox's changes.
	for _, p := range s.stopHolder() {
		if err := removeMountPoint(s.upperDir(), p); err != nil {
			return sandbox.Layer{}, fmt.Errorf("snapshotting landlock sandbox: %w", err)
		}
	}
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

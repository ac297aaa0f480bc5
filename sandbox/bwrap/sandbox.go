package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/overlay"
)

// hostSystemDirs are bound read-only from the host when there is no image.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}

// hiddenHostFiles are covered by an empty file when the host's /etc is
// bound: secrets the host's root owns, which a sandbox whose root maps to
// the engine's own uid (a non-root engine) could otherwise read.
var hiddenHostFiles = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers"}

// hiddenHostDirs are covered by an empty tmpfs (engine configuration may
// hold keys; SSH host keys).
var hiddenHostDirs = []string{"/etc/evalsi", "/etc/ssh", "/etc/sudoers.d"}

// In-sandbox paths of the helper binary and the egress proxy socket.
const (
	sandboxHelper    = "/.evalsi/evalsi"
	sandboxProxySock = "/.evalsi/proxy.sock"
	proxyPort        = "3128"
	proxyListen      = "127.0.0.1:" + proxyPort
)

// Sandbox is one bubblewrap sandbox.
type Sandbox struct {
	rung     *Rung
	cfg      sandbox.Config
	bwrap    string
	helper   string
	id       string
	state    string
	ownState bool
	stub     string
	// sharedStub: stub is the one beside the state dir, which other
	// sandboxes use too; it is not removed with this one.
	sharedStub bool
	tmp        string
	// etc holds the sandbox's /etc/hosts, /etc/hostname and
	// /etc/resolv.conf (etcfiles.go), beside tmp: under disk_mb, on the
	// bounded filesystem too.
	etc string
	// disk bounds the writable state (disk_mb): the root's upper and work
	// directories, tmp and shm (bound at /dev/shm) live on it. Nil: no
	// bound.
	disk     *limits.Disk
	shm      string
	workdir  string
	noImage  bool
	root     *overlay.Root
	cgroups  *limits.Cgroups
	rlimits  limits.Plan
	nproc    bool // RLIMIT_NPROC applied inside (only without a pids cgroup)
	seccomp  []byte
	proxy    string // host path of the proxy socket bound into the sandbox
	proxyDir string // a short directory holding it, when the state dir is too deep
	bridge   net.Listener
	uid, gid int
	baseEnv  map[string]string
	seq      atomic.Int64

	// ns is the sandbox's user namespace map; inNS says bwrap runs as root
	// of a namespace with it (a full map), so ids 0–65535 and a
	// container's capabilities are the sandbox's while its root is an
	// unprivileged id outside. Otherwise (a non-root engine with only its
	// own uid to map) bwrap makes a single-id namespace with no
	// capabilities, as before.
	ns   userNS
	inNS bool
	// hostUID, hostGID are the host ids of root inside.
	hostUID, hostGID int

	// mu guards the policy (SetPolicy changes it) and the report.
	mu     sync.Mutex
	policy sandbox.Policy
	report sandbox.Report
	// upstream is the egress proxy address the bridge dials (SetPolicy
	// may change it).
	upstream atomic.Pointer[string]

	// srv is the exec server commands run through (started at the first
	// command; again after SetPolicy widens the network).
	srvMu sync.Mutex
	srv   *execServer
	// v2mu serialises moving the whole server into a command's cgroup v2.
	v2mu sync.Mutex

	life *sandbox.Lifecycle
	// removing counts the background work on the commands' cgroups:
	// removing a finished command's, arming the next one's. Close waits
	// for it, so no cgroup is made or left after Close returns.
	removing sync.WaitGroup
}

// removeLater removes a command's cgroup in the background.
func (s *Sandbox) removeLater(cg *limits.Cgroup) {
	s.removing.Add(1)
	go func() {
		defer s.removing.Done()
		if err := cg.Remove(); err != nil {
			slog.Warn("removing a command's cgroup", "err", err)
		}
	}()
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
	s := &Sandbox{rung: r, cfg: cfg, bwrap: bw, helper: helper, noImage: cfg.Root == "", life: sandbox.NewLifecycle("bwrap")}
	if s.cfg.Policy.Network == "" {
		s.cfg.Policy.Network = sandbox.NetworkDeny
	}
	switch s.cfg.Policy.Network {
	case sandbox.NetworkDeny, sandbox.NetworkAllow, sandbox.NetworkAllowlist:
	default:
		return nil, fmt.Errorf("creating a bwrap sandbox: unknown network mode %q (deny, allowlist or allow)", cfg.Policy.Network)
	}
	if s.cfg.Policy.Network != sandbox.NetworkDeny && s.cfg.Policy.ProxyAddr == "" {
		// allow, like allowlist, goes out through the egress proxy (in
		// allow-all mode), never through the host's network namespace,
		// whose loopback services the sandbox must not reach.
		return nil, fmt.Errorf("creating a bwrap sandbox: network %s needs an egress proxy (policy proxy_addr is empty); the sandbox never shares the host's network", s.cfg.Policy.Network)
	}
	s.policy = s.cfg.Policy
	s.ns = r.userNamespace(helper)
	if s.ns.err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", s.ns.err)
	}
	s.inNS = s.ns.idmap.Full()
	s.hostUID, _ = s.ns.idmap.HostUID(0)
	s.hostGID, _ = s.ns.idmap.HostGID(0)
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
	// The id is the hostname too: never 12 decimal digits, which glibc
	// takes for an address (sandbox.NewHostname).
	if s.id, err = sandbox.NewHostname(); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}

	if s.state, s.ownState, err = sandbox.StateDir(cfg.StateDir, "bwrap"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.cleanup()
		}
	}()

	if cfg.StateDir != "" {
		s.stub, err = sharedStub(filepath.Dir(s.state), s.noImage)
		s.sharedStub = err == nil
	}
	if !s.sharedStub {
		s.stub = filepath.Join(s.state, "stub")
		if err := buildStub(s.stub, s.noImage); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox: preparing mount points: %w", err)
		}
	}
	// rootState holds the root's writable state: the state directory, or
	// the disk_mb filesystem in it.
	rootState := s.state
	if cfg.Limits.DiskMB > 0 {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("creating a bwrap sandbox: disk_mb=%d needs the engine to run as root on the bwrap rung (the bound is a tmpfs it mounts); run as root, use the docker rung, or leave disk_mb unset", cfg.Limits.DiskMB)
		}
		if s.disk, err = limits.MountDisk(filepath.Join(s.state, "disk"), cfg.Limits.DiskMB, s.hostUID, s.hostGID); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
		}
		rootState = s.disk.Dir
		s.shm = filepath.Join(rootState, "shm")
	}
	s.tmp = filepath.Join(rootState, "tmp")
	for _, d := range []string{s.tmp, s.shm} {
		if d == "" {
			continue
		}
		if err := os.Mkdir(d, 0o777); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
		}
		if err := os.Chmod(d, 0o1777); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
		}
		if err := s.chownHost(d); err != nil {
			return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
		}
	}

	s.etc = filepath.Join(rootState, "etcfiles")
	if err := s.writeEtcFiles(s.etc); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: writing its /etc/hosts, /etc/hostname and /etc/resolv.conf: %w", err)
	}

	// Snapshot layers were written inside, so their files carry host ids
	// already; the image root and the stub store ids as the sandbox sees
	// them and are shifted to the map (see overlay.Shift).
	var lowers []string
	var shifted []bool
	for _, l := range cfg.Layers {
		if l.Dir == "" {
			return nil, fmt.Errorf("creating a bwrap sandbox: layer %q has no directory (bwrap stacks directory layers only)", l.Ref)
		}
		lowers, shifted = append(lowers, l.Dir), append(shifted, false)
	}
	if cfg.Root != "" {
		lowers, shifted = append(lowers, cfg.Root), append(shifted, true)
	}
	lowers, shifted = append(lowers, s.stub), append(shifted, true)
	var shift overlay.Shift
	if s.inNS {
		shift = overlay.Shift{Userns: s.ns.fd, Layers: shifted, HostID: s.hostID}
	}
	if s.root, err = overlay.MountShifted(lowers, rootState, shift); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}

	etc := filepath.Join(s.root.Merged, "etc")
	if s.noImage {
		etc = "/etc"
	}
	if s.uid, s.gid, err = sandboxUser(cfg.User, etc); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}
	if _, ok := s.ns.idmap.HostUID(s.uid); s.inNS && !ok {
		return nil, fmt.Errorf("creating a bwrap sandbox: user %q is uid %d, outside the ids the sandbox's user namespace maps (%s)", cfg.User, s.uid, strings.Join(s.ns.idmap.Describe(), ", "))
	}
	if _, ok := s.ns.idmap.HostGID(s.gid); s.inNS && !ok {
		return nil, fmt.Errorf("creating a bwrap sandbox: user %q has gid %d, outside the ids the sandbox's user namespace maps", cfg.User, s.gid)
	}
	if err := s.etcMountPoints(); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: %w", err)
	}
	if err := s.mkdirOwned(s.root.Merged, s.workdir); err != nil {
		return nil, fmt.Errorf("creating workdir %s: %w", s.workdir, err)
	}

	var cgNote string
	if s.cgroups, cgNote, err = limits.Detect(cfg.Limits.Cgroup, r.host()); err != nil {
		return nil, fmt.Errorf("creating a bwrap sandbox: sandbox.cgroup %q: %w", cfg.Limits.Cgroup, err)
	}
	s.rlimits = limits.PlanRlimits(cfg.Limits, !s.cgroups.HasMemory())
	// RLIMIT_NPROC is the process cap only without a pids cgroup: a fork
	// it refuses leaves no trace, while pids.max counts its refusals (and
	// a command's cgroup holds all it starts). It binds unless root inside
	// is the host's uid 0, which the kernel exempts (it counts per user
	// namespace, so sandboxes sharing a map do not share the count).
	s.nproc = s.hostUID != 0 && s.rlimits.NProc > 0 && s.cgroups == nil
	if s.seccomp, err = limits.SeccompNotifyFilter(); err != nil {
		return nil, err
	}

	if s.cfg.Policy.Network != sandbox.NetworkDeny {
		if err := s.setupProxy(s.cfg.Policy.ProxyAddr); err != nil {
			return nil, err
		}
	}
	if !s.noImage {
		// The exec server runs inside the image: a dynamically linked
		// build needs the image to have its loader (and libc).
		if interp := elfInterpreter(helper); interp != "" {
			if _, err := os.Stat(filepath.Join(s.root.Merged, interp)); err != nil {
				return nil, fmt.Errorf("creating a bwrap sandbox: commands run through %s inside the image, but it is dynamically linked (%s) and the image lacks that loader; build evalsi with CGO_ENABLED=0", helper, interp)
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
	// Start the exec server now, in the background: building the
	// namespaces and starting the server overlaps with what the caller
	// does before its first command (with a model in the loop, all of it).
	go s.prestart()
	return s, nil
}

// prestart starts the exec server ahead of the first command; a failure is
// left for that command to meet (and report) when it starts one itself.
func (s *Sandbox) prestart() {
	if s.life.Begin() != nil {
		return
	}
	defer s.life.End()
	if srv, err := s.server(context.Background()); err == nil {
		s.release(srv)
	}
}

func (s *Sandbox) makeReport(cgNote string) sandbox.Report {
	rep := sandbox.Report{
		Rung:      sandbox.RungBwrap,
		Isolation: sandbox.LevelNamespaced,
		Network:   s.cfg.Policy.Network,
		ProxyAddr: s.cfg.Policy.ProxyAddr,
		UIDMap:    s.ns.idmap.Describe(),
	}
	if s.inNS {
		rep.Capabilities = slices.Sorted(slices.Values(sandbox.ContainerCapabilities))
	}
	if !s.inNS && (s.uid != 0 || s.gid != 0) {
		// bwrap's own namespace maps the one id the user runs as.
		rep.UIDMap = []string{fmt.Sprintf("%d-%d -> %d-%d", s.uid, s.uid, s.hostUID, s.hostUID)}
	}
	rep.Limits = append(rep.Limits, s.cgroups.Plan(s.cfg.Limits)...)
	for _, rl := range s.rlimits.Outer {
		rep.Limits = append(rep.Limits, rl.Describe())
	}
	if s.nproc {
		rep.Limits = append(rep.Limits, limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc}.Describe())
	}
	if s.disk != nil {
		rep.Limits = append(rep.Limits, s.disk.Describe())
	}
	rep.Limits = append(rep.Limits, fmt.Sprintf("timeout=%s", sandbox.CommandTimeout(s.cfg, sandbox.ExecRequest{})))
	rep.Notes = append(rep.Notes, cgNote)
	switch {
	case s.cgroups != nil:
		rep.Notes = append(rep.Notes, "processes are capped by each command's pids cgroup, whose refused forks are recorded as pids denials; RLIMIT_NPROC is not set, so no fork is refused unseen")
	case s.nproc:
		rep.Notes = append(rep.Notes, "processes are capped by RLIMIT_NPROC (no pids cgroup): a fork it refuses leaves no event, so a pids denial is inferred from a fork failure on stderr")
	default:
		rep.Notes = append(rep.Notes, "no process cap: RLIMIT_NPROC does not bind uid 0 and no pids cgroup is available; fork bombs are bounded only by the command timeout")
	}
	if s.disk != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("disk_mb: the root's changes, the workdir, /tmp and /dev/shm share a %d MB tmpfs (writes past it fail with ENOSPC; /dev is read-only); it is memory, so its pages also count against the writing command's memory limit; a full layer after (or while) a command runs is recorded as a disk denial", s.disk.MB))
	}
	if !s.cgroups.HasMemory() && s.cfg.Limits.MemoryMB > 0 {
		rep.Notes = append(rep.Notes, "memory is capped by RLIMIT_AS (address space): allocations fail instead of an OOM kill, and runtimes reserving large virtual ranges may need more")
	}
	rep.Notes = append(rep.Notes, s.ns.note)
	caps := "capabilities: none"
	if s.inNS {
		caps = "capabilities: Docker's default set, inside the user namespace only (root inside is uid " + strconv.Itoa(s.hostUID) + " outside); a command run as another user has none"
	}
	rep.Notes = append(rep.Notes, "namespaces: user, mount, pid, net, ipc, uts, cgroup; "+caps+"; seccomp denies "+strings.Join(limits.DeniedSyscallNames(), ", "))
	rep.Notes = append(rep.Notes, "observed: the exec server supervises each command's seccomp filter (user notification), so refused syscalls become syscall denials and connect/sendto/sendmsg to addresses past loopback (refused by the network namespace, which has only lo) become network denials, the first 10 distinct per kind with counts; signals sent to PID 1 are recorded as ignored; destinations are read from the caller's memory, so a call whose address another thread rewrites meanwhile may go unrecorded, never through")
	if !s.inNS {
		rep.Notes = append(rep.Notes, "without a multi-id user namespace the exec server has no CAP_SYS_PTRACE: a process that makes itself non-dumpable hides its network destinations from the record (its calls are still refused)")
	}
	rep.Notes = append(rep.Notes, "masked: "+strings.Join(procPaths(sandbox.MaskedPaths), ", ")+"; read-only: "+strings.Join(procPaths(sandbox.ReadOnlyPaths), ", ")+" (those absent on this kernel need no mask); /sys is not mounted")
	exec := "commands are forked by an exec server that is PID 1 of the sandbox's namespaces (not dumpable, unkillable from inside); each runs in its own session"
	if s.cgroups != nil {
		exec += " and cgroup"
	}
	rep.Notes = append(rep.Notes, exec+", and what it leaves running is killed when it ends (once no other command runs, every process but the server and the running services' leaders and their descendants: each leader is a child subreaper, so a daemon a service detaches with a double fork and setsid stays its descendant, and a process's parent is fixed at fork, so none of a command's is among them)")
	if _, err := ll.LandlockGetABIVersion(); err == nil {
		rep.Notes = append(rep.Notes, "each command runs in a Landlock domain of its own, which restricts no file access: it cannot ptrace or open the memory, environment or descriptors of processes outside it (the server's, a service's, another command's)")
	} else {
		rep.Notes = append(rep.Notes, "no Landlock in this kernel: a command can open a service's /proc/PID/mem (same uid), and so have the service fork processes, which as its descendants the sweep after each command spares")
	}
	users := "a command naming a user (docker exec -u's forms) runs as that user of the sandbox, resolved by the exec server from the sandbox's own /etc/passwd and /etc/group, as runc resolves it"
	if !s.inNS {
		users += "; with this single-id map only the sandbox's own user can run, another is an error"
	}
	rep.Notes = append(rep.Notes, users)
	rep.Notes = append(rep.Notes, fmt.Sprintf("file reads and writes are served by the exec server, inside the sandbox's view: regular files only, reads capped at %d MiB", sandbox.MaxReadFile>>20))
	rep.Notes = append(rep.Notes, s.etcNote())
	if s.noImage {
		note := "no image: the host's /usr, /bin, /sbin, /lib*, /etc read-only (" + strings.Join(hiddenHostFiles, ", ") + " and " + strings.Join(hiddenHostDirs, ", ") + " hidden)"
		if s.inNS {
			note += "; their files appear owned by nobody inside, since host ids are not in the sandbox's map"
		}
		rep.Notes = append(rep.Notes, note)
	}
	if n := s.root.Note(); n != "" {
		rep.Notes = append(rep.Notes, n)
	} else if s.inNS {
		rep.Notes = append(rep.Notes, "root: overlayfs over the image and snapshot layers with a private upper directory; the image and stub are idmapped mounts, so their files are owned by the mapped ids")
	} else {
		rep.Notes = append(rep.Notes, "root: overlayfs over the image and snapshot layers with a private upper directory")
	}
	if s.uid != 0 || s.gid != 0 {
		if s.inNS {
			rep.Notes = append(rep.Notes, fmt.Sprintf("user %q runs as uid %d gid %d inside the user namespace", s.cfg.User, s.uid, s.gid))
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("user %q runs as uid %d gid %d inside; the user namespace maps only that id, to the engine's own uid %d, so file access is the engine user's", s.cfg.User, s.uid, s.gid, s.hostUID))
		}
	}
	if s.cfg.ReadOnlyRoot {
		rep.Notes = append(rep.Notes, "read-only root: only "+s.workdir+" and /tmp are writable")
	}
	if s.proxy != "" {
		rep.Notes = append(rep.Notes, proxyNote(s.cfg.Policy.Network))
	}
	return rep
}

// proxyNote says how a proxied network mode reaches out.
func proxyNote(network string) string {
	if network == sandbox.NetworkAllow {
		return "allow: the sandbox's own network namespace, no route out; HTTP(S)_PROXY=http://" + proxyListen + " forwards to the egress proxy (allow-all, logging, no host loopback); the host's network is never shared"
	}
	return "allowlist: no network namespace route out; HTTP(S)_PROXY=http://" + proxyListen + " forwards to the egress proxy's socket"
}

// procPaths are the paths of ps under /proc (the only ones a bwrap
// sandbox mounts).
func procPaths(ps []string) []string {
	var out []string
	for _, p := range ps {
		if strings.HasPrefix(p, "/proc/") {
			out = append(out, p)
		}
	}
	return out
}

// hostID is the host id an id inside maps to (gid: a group id); ids the
// map lacks become the overflow id, as the kernel shows them.
func (s *Sandbox) hostID(id int, gid bool) int {
	h, ok := s.ns.idmap.HostUID(id)
	if gid {
		h, ok = s.ns.idmap.HostGID(id)
	}
	if !ok {
		return 65534
	}
	return h
}

// chownHost gives p, made by the engine, to root inside (a no-op unless
// the engine is root: otherwise what it makes is its own uid's, which is
// root inside).
func (s *Sandbox) chownHost(p string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(p, s.hostUID, s.hostGID)
}

// stubVersion names what buildStub makes: change it with buildStub, so a
// shared stub made by another build is never taken for this one's.
const stubVersion = "2"

// sharedStub returns the stub layer in dir that sandboxes whose state dirs
// are in dir share, building it the first time. The stub is the same for
// every sandbox of one kind (image or host directories) and, as a lower
// layer, never written to; building one per sandbox created and deleted a
// score of inodes a trial, which ext4's inode allocator makes costly under
// churn. It is built under a temporary name and renamed into place, so a
// stub found there is complete; of two sandboxes building it at once, one
// rename wins and the other uses that stub.
func sharedStub(dir string, noImage bool) (string, error) {
	kind := "image"
	if noImage {
		kind = "host"
	}
	stub := filepath.Join(dir, ".bwrap-stub-v"+stubVersion+"-"+kind)
	if st, err := os.Stat(filepath.Join(stub, ".evalsi", "empty")); err == nil && st.Mode().IsRegular() {
		return stub, nil
	}
	tmp, err := os.MkdirTemp(dir, ".bwrap-stub-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, "stub")
	if err := buildStub(built, noImage); err != nil {
		return "", err
	}
	if err := os.Rename(built, stub); err != nil {
		if st, serr := os.Stat(filepath.Join(stub, ".evalsi", "empty")); serr == nil && st.Mode().IsRegular() {
			return stub, nil // another sandbox's rename won
		}
		return "", err
	}
	return stub, nil
}

// buildStub makes the lowest layer: mount points bwrap needs even when the
// root is read-only (with an image, those of the /etc files too), and,
// without an image, the host's system directory layout (symlinks such as
// bin -> usr/bin copied as symlinks).
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
		// Mount points of the sandbox's own /etc files, where the image
		// has none.
		if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
			return err
		}
		for _, f := range etcFiles {
			if err := os.WriteFile(filepath.Join(dir, "etc", f), nil, 0o644); err != nil {
				return err
			}
		}
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

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107

// setupProxy makes the egress proxy (unix:/path or host:port) reachable as
// a unix socket of the sandbox's own, bound inside and owned by root inside;
// the bridge dials s.upstream, which SetPolicy may change.
func (s *Sandbox) setupProxy(addr string) error {
	if addr == "" {
		return errors.New("bwrap sandbox: the network mode needs an egress proxy (policy proxy_addr is empty)")
	}
	network, target := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if st, err := os.Stat(p); err != nil || st.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("bwrap sandbox: egress proxy socket %s is not a unix socket: %v", p, err)
		}
		network, target = "unix", p
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("bwrap sandbox: egress proxy address %q: want unix:/path or host:port: %w", addr, err)
	}
	up := network + " " + target
	s.upstream.Store(&up)
	if s.bridge != nil {
		return nil
	}
	sock := filepath.Join(s.state, "proxy.sock")
	if len(sock) >= maxSocketPath {
		// A deep state dir would not fit sun_path: the socket goes in a
		// short directory of its own, removed with the sandbox.
		dir, err := os.MkdirTemp("", "evalsi-px-")
		if err != nil {
			return fmt.Errorf("bwrap sandbox: bridging to egress proxy %s: %w", addr, err)
		}
		s.proxyDir, sock = dir, filepath.Join(dir, "proxy.sock")
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("bwrap sandbox: bridging to egress proxy %s: %w", addr, err)
	}
	if err := s.chownHost(sock); err != nil {
		ln.Close()
		return fmt.Errorf("bwrap sandbox: bridging to egress proxy %s: %w", addr, err)
	}
	s.bridge, s.proxy = ln, sock
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				network, target, _ := strings.Cut(*s.upstream.Load(), " ")
				up, err := net.DialTimeout(network, target, 10*time.Second)
				if err != nil {
					slog.Warn("bwrap sandbox cannot reach the egress proxy", "proxy", target, "err", err)
					c.Close()
					return
				}
				splice(c, up)
			}()
		}
	}()
	return nil
}

// Exec runs one command through the sandbox's exec server (started at the
// first command): forked inside the sandbox's namespaces, in its own
// session and, with cgroups, its own cgroup.
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
	cwd := sandbox.InSandboxPath(s.workdir, req.Workdir)
	timeout := sandbox.CommandTimeout(s.cfg, req)
	limit := sandbox.OutputLimit(req)

	srv, err := s.server(ctx)
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	defer s.release(srv)

	var cg *limits.Cgroup
	var armed uint32
	if s.cgroups != nil {
		if slot := s.takeArmed(srv); slot != nil {
			cg, armed = slot.cg, slot.id
		} else if cg, err = s.cgroups.New(fmt.Sprintf("evalsi-%s-%d", s.id, s.seq.Add(1)), s.cfg.Limits); err != nil {
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
		}
		// Removed behind the command (rmdir waits out the last
		// process's exit); Close waits for it.
		defer s.removeLater(cg)
	}
	start := time.Now()
	argv, env := s.command(req.Argv, env, false)
	m := execproto.ExecMsg{Argv: argv, Env: env, Dir: cwd, Stdin: req.Stdin, Limit: limit, Join: cg != nil && armed == 0, Armed: armed}
	s.setUser(&m, req)
	// Stopped before Exec returns, whichever way: the hook is never
	// called after.
	out := sandbox.NewOutputStream(limit, req.Output)
	defer out.Stop()
	c, err := srv.start(m, out)
	if err != nil {
		if armed != 0 {
			// The armed thread would keep the cgroup busy: end it.
			srv.send(execproto.FrameKill, armed, nil)
		}
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
	}
	defer srv.forget(c)

	// moveBack is set while the whole server is in the command's cgroup
	// (v2): killing the cgroup then would reach the server, so only the
	// server kills the command until it is moved back.
	var moveBack func()
	defer func() {
		if moveBack != nil {
			moveBack()
		}
	}()
	kill := func() {
		srv.send(execproto.FrameKill, c.id, nil)
		if cg != nil && moveBack == nil {
			s.killCommands(srv, cg)
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	var stopErr error
	var ex execproto.ExitMsg
	killed := false
	var grace <-chan time.Time
	// A full disk_mb layer is looked for while the command runs too, so a
	// command that fills it and deletes what it wrote is seen (mostly).
	var diskFull string
	var diskTick <-chan time.Time
	if s.disk != nil {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		diskTick = t.C
	}
wait:
	for {
		select {
		case <-diskTick:
			if diskFull = s.diskFull(); diskFull != "" {
				diskTick = nil
			}
		case tid := <-c.join:
			back, err := s.joinCgroup(srv, cg, tid)
			if err != nil {
				kill()
				return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
			}
			moveBack = back
			if err := srv.send(execproto.FrameGo, c.id, nil); err != nil {
				return sandbox.ExecResult{}, fmt.Errorf("exec: %w", err)
			}
		case <-c.started:
			c.started = nil
			if moveBack != nil {
				moveBack()
				moveBack = nil
			}
		case ex = <-c.exit:
			break wait
		case <-srv.dead:
			return sandbox.ExecResult{}, fmt.Errorf("exec: %w", srv.deadErr)
		case <-timer.C:
			timedOut = true
		case <-ctx.Done():
			stopErr = fmt.Errorf("exec: %w", ctx.Err())
		case <-s.life.Done():
			stopErr = errors.New("exec: bwrap sandbox closed while the command ran")
		case <-grace:
			// The server does not answer a kill: end the sandbox's
			// processes with it; the next command starts a new one.
			s.srvMu.Lock()
			if s.srv == srv {
				s.retire(srv) // killed when released, below
			}
			s.srvMu.Unlock()
			return sandbox.ExecResult{}, errors.New("exec: the sandbox's exec server did not stop the command; restarted it")
		}
		if (timedOut || stopErr != nil) && !killed {
			killed = true
			kill()
			grace = time.After(5 * time.Second)
		}
	}
	if moveBack != nil {
		// The exit can be picked before the start: frames are ordered,
		// so the command has started (or failed to) by now.
		moveBack()
		moveBack = nil
	}
	if ex.Setup != "" {
		return sandbox.ExecResult{}, fmt.Errorf("exec: %s", ex.Setup)
	}
	if cg != nil {
		s.killCommands(srv, cg) // whatever the command left running
	}
	var done execproto.DoneMsg
	select {
	case done = <-c.done:
	case <-srv.dead:
		return sandbox.ExecResult{}, fmt.Errorf("exec: %w", srv.deadErr)
	}
	stdout, stderr := out.Bytes()
	res := sandbox.ExecResult{
		ExitCode:  ex.Code,
		Stdout:    stdout,
		Stderr:    stderr,
		Truncated: done.TruncatedStdout || done.TruncatedStderr || out.Truncated(),
		TimedOut:  timedOut,
		Duration:  time.Since(start),
	}
	if killed {
		res.ExitCode = 128 + int(syscall.SIGKILL)
	}
	res.Denials = s.denials(res, cg, timedOut, timeout)
	res.Denials = append(res.Denials, s.refusals(done.Denials)...)
	if s.disk != nil && diskFull == "" {
		diskFull = s.diskFull()
	}
	if diskFull != "" {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "disk", Detail: diskFull})
	}
	return res, stopErr
}

// commandEnv is a request's environment: the sandbox's, the proxy's when
// the network goes through it, then the request's. For a request naming a
// user, the sandbox's default HOME is left out, so the exec server sets
// the user's from passwd, as docker exec does, unless the config or the
// request sets one.
func (s *Sandbox) commandEnv(req sandbox.ExecRequest) ([]string, error) {
	envMap := map[string]string{}
	for k, v := range s.baseEnv {
		envMap[k] = v
	}
	if _, set := s.cfg.Env["HOME"]; req.User != "" && !set {
		delete(envMap, "HOME")
	}
	if pol := s.currentPolicy(); pol.Network != sandbox.NetworkDeny {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			envMap[k] = "http://" + proxyListen
		}
		// The sandbox's own loopback is reached directly (sandbox.NoProxy).
		np := sandbox.NoProxy(pol.AllowHosts, s.id)
		envMap["NO_PROXY"], envMap["no_proxy"] = np, np
	}
	return sandbox.CommandEnv(envMap, req.Env)
}

// setUser says who m runs as: the request's user, resolved by the exec
// server inside the sandbox (from its own /etc/passwd and /etc/group, as
// they are now); else the sandbox's (Config.User, resolved at Create),
// which the server switches to only in a multi-id namespace (bwrap's own
// single-id one already runs as it).
func (s *Sandbox) setUser(m *execproto.ExecMsg, req sandbox.ExecRequest) {
	switch {
	case req.User != "":
		m.Spec = req.User
	case s.inNS && (s.uid != 0 || s.gid != 0):
		m.User, m.UID, m.GID = true, s.uid, s.gid
	}
}

// diskFull describes a full disk_mb filesystem ("" when it has room).
func (s *Sandbox) diskFull() string {
	full, detail, err := s.disk.Full()
	if err != nil {
		slog.Warn("checking the bwrap sandbox's disk", "err", err)
	}
	if !full {
		return ""
	}
	return detail
}

// refusals turns what the exec server's seccomp supervisor recorded into
// denials.
func (s *Sandbox) refusals(ds []execproto.Denial) []sandbox.Denial {
	var out []sandbox.Denial
	for _, d := range ds {
		times := ""
		if d.Count > 1 {
			times = fmt.Sprintf(" (%d times)", d.Count)
		}
		switch {
		case d.Syscall == -1:
			out = append(out, sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%d more refused attempts of this kind, not listed", d.Count)})
		case d.Kind == "network":
			out = append(out, sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s refused%s: network %s, the sandbox's namespace has only loopback", d.Detail, times, s.currentPolicy().Network)})
		default:
			name := limits.SyscallName(d.Syscall)
			if name == "" {
				name = "syscall " + strconv.Itoa(d.Syscall)
			}
			if d.Detail != "" {
				name += "(" + d.Detail + ")"
			}
			if limits.IsSignalSyscall(d.Syscall) {
				// A signal aimed at PID 1, which goes on and is ignored.
				out = append(out, sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s ignored: PID 1 is the sandbox's exec server, which takes no signal from commands%s", name, times)})
				continue
			}
			out = append(out, sandbox.Denial{Kind: d.Kind, Detail: fmt.Sprintf("%s refused by seccomp (EPERM)%s", name, times)})
		}
	}
	return out
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
	if s.nproc {
		// RLIMIT_NPROC makes fork fail with EAGAIN and records nothing;
		// the shell's or runtime's complaint is the only trace.
		for _, sig := range []string{"fork: retry", "fork: Resource temporarily unavailable", "Cannot fork", "can't fork"} {
			if bytes.Contains(res.Stderr, []byte(sig)) {
				out = append(out, sandbox.Denial{Kind: "pids", Detail: fmt.Sprintf("a fork failed under rlimit-nproc=%d (inferred from %q on stderr)", s.rlimits.NProc, sig)})
				break
			}
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

// readStatus reads bwrap's --json-status-fd lines and sends the pid of the
// sandbox's first process ({"child-pid": N}) on childc, which it closes at
// the end; it closes r once bwrap has closed its end.
func readStatus(r *os.File, childc chan<- int) {
	defer close(childc)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		var m map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if v, ok := m["child-pid"]; ok && !sent {
			if pid, err := strconv.Atoi(string(v)); err == nil {
				childc <- pid
				sent = true
			}
		}
	}
}

// Report describes the isolation that applies.
func (s *Sandbox) Report() sandbox.Report {
	s.mu.Lock()
	r := s.report
	s.mu.Unlock()
	r.Limits = slices.Clone(r.Limits)
	r.Notes = slices.Clone(r.Notes)
	return r
}

// Snapshot moves the sandbox's changes out as a layer directory next to the
// state directory (a rename: constant time). The caller owns the layer and
// removes it when done; the sandbox only accepts Close afterwards.
func (s *Sandbox) Snapshot(ctx context.Context) (sandbox.Layer, error) {
	dest, err := s.life.Snapshot(s.state)
	if err != nil {
		return sandbox.Layer{}, err
	}
	s.stopServer()
	if err := s.root.Snapshot(dest); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
	}
	return sandbox.Layer{Dir: dest}, nil
}

// Close kills running commands and removes the sandbox; it is idempotent.
func (s *Sandbox) Close(ctx context.Context) error {
	return s.life.Close(func() error {
		s.stopServer()
		return s.cleanup()
	})
}

func (s *Sandbox) cleanup() error {
	s.removing.Wait()
	var errs []error
	if s.bridge != nil {
		s.bridge.Close()
	}
	if s.root != nil {
		if err := s.root.Remove(); err != nil {
			errs = append(errs, fmt.Errorf("removing bwrap sandbox root: %w", err))
		}
	}
	if s.disk != nil {
		if err := s.disk.Unmount(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.proxyDir != "" {
		if err := os.RemoveAll(s.proxyDir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.ownState {
		if err := os.RemoveAll(s.state); err != nil {
			errs = append(errs, err)
		}
	} else {
		stub := s.stub
		if s.sharedStub {
			stub = ""
		}
		for _, p := range []string{stub, s.tmp, s.etc, filepath.Join(s.state, "proxy.sock")} {
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

// currentPolicy is the network policy commands starting now get.
func (s *Sandbox) currentPolicy() sandbox.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.policy
}

// SetPolicy widens the network for the commands that follow, as a granted
// request_escalation asks: to allow, through the egress proxy p.ProxyAddr
// (in allow-all mode), never by sharing the host's network. The exec
// server is restarted with the proxy forwarded when it had none.
func (s *Sandbox) SetPolicy(p sandbox.Policy) error {
	if p.Network != sandbox.NetworkAllow {
		return fmt.Errorf("bwrap sandbox: can only widen the network to %q, not %q", sandbox.NetworkAllow, p.Network)
	}
	if p.ProxyAddr == "" {
		return errors.New("bwrap sandbox: widening the network to allow needs an egress proxy (policy proxy_addr is empty); the sandbox never shares the host's network")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.setupProxy(p.ProxyAddr); err != nil {
		return err
	}
	s.policy = p
	s.report.Network, s.report.ProxyAddr = p.Network, p.ProxyAddr
	s.report.Notes = append(slices.Clone(s.report.Notes), "widened by SetPolicy: "+proxyNote(p.Network))
	return nil
}

// Package bwrap is the bubblewrap rung: a sandbox is one bwrap invocation
// with new mount, PID, network, IPC, UTS and cgroup namespaces inside a user
// namespace whose ids 0–65535 map to a subordinate range of the host
// (sandbox/userns; bwrap runs as root of it), so root inside holds a
// container's capabilities there and is an unprivileged id outside. It adds
// a seccomp filter, its own /proc (with Docker's masked and read-only
// paths), /dev and /tmp, over a root assembled by sandbox/overlay (image
// and stub layers idmapped to the sandbox's ids). A non-root engine without
// newuidmap gets bwrap's own single-id namespace and no capabilities.
// Its PID 1 is an exec server (the engine binary re-executed, bound in as
// /.evalsi/evalsi), started at the first command, which forks each command
// inside those namespaces: building them is most of what a bwrap invocation
// costs, so a command costs about a fork and exec instead. It also serves
// ReadFile and WriteFile, in the sandbox's own view. Each command gets its
// own session and, with cgroups, its own cgroup, and whatever it leaves
// running is killed when it ends. Network allow and allowlist go out only
// through the egress proxy, forwarded to 127.0.0.1:3128 inside; widening
// the network (SetPolicy) starts a new server with the proxy forwarded.
//
// Limits: a per-command cgroup (v2 when delegated, v1 pids/memory/cpu when
// the engine is root on a hybrid host), which the command's first process
// is forked into, plus rlimits (address space when no memory cgroup
// applies, file size, core, and, only without a pids cgroup, RLIMIT_NPROC,
// which binds now that root inside is not the host's uid 0 but refuses
// forks without a trace). disk_mb puts everything the sandbox can write
// (the overlay's upper and work directories, /tmp, /dev/shm) on one tmpfs
// of that size and makes the rest of /dev read-only.
//
// What the rung refuses shows in each command's result: the exec server
// installs the seccomp filter on the thread that forks the command, with a
// listener of its own (user notification), answers the refused syscalls
// with EPERM and records them, and records connect/sendto/sendmsg to
// addresses past loopback (which the network namespace refuses); pids.max
// and OOM events, a full disk_mb filesystem, timeouts and SIGXFSZ are
// denials too.
//
// The engine binary re-executes itself as those helpers, so programs (and
// tests) that use this package call reexec.Init first thing in main.
package bwrap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/userns"
)

// Options configure the rung; zero values pick the defaults.
type Options struct {
	// Bwrap is the bwrap binary (default: "bwrap" on PATH).
	Bwrap string
	// Helper is the binary run as the launcher and bound into sandboxes as
	// /.evalsi/evalsi (default: DefaultHelper(): evalsi-sandbox next to the
	// engine from the same build, else the engine itself). It must
	// be static when images without glibc use network: allowlist.
	Helper string
	// Host is where cgroups are looked for (default: limits.ThisHost()).
	Host *limits.Host
}

// Rung makes bubblewrap sandboxes.
type Rung struct {
	opts Options

	// helper caches DefaultHelper's answer: it reads the candidate's build
	// info, which is not worth repeating for every sandbox.
	helperOnce sync.Once
	helper     string
	helperErr  error

	// The user namespace map of this engine's sandboxes, and a namespace
	// with it for idmapped mounts (open for the rung's lifetime: one
	// descriptor), both worked out at the first sandbox.
	nsOnce sync.Once
	ns     userNS

	viewsOnce sync.Once
	viewsErr  error
	// views is this process's directory in viewsDir; viewsLock, held for
	// the process's life, tells other engines it is alive.
	views     string
	viewsLock *os.File
}

// userNS is how sandboxes get their user namespace.
type userNS struct {
	idmap userns.IDMap
	note  string
	// fd is a namespace with idmap, for shifting layers the host owns
	// (nil when the map is not full or the engine is not root).
	fd  *os.File
	err error
}

func (r *Rung) userNamespace(helper string) userNS {
	r.nsOnce.Do(func() {
		ns := &r.ns
		if ns.idmap, ns.note, ns.err = userns.ForEngine(); ns.err != nil {
			return
		}
		if os.Geteuid() == 0 && ns.idmap.Full() {
			ns.fd, ns.err = ns.idmap.Namespace(helper)
		}
	})
	return r.ns
}

// New returns the bwrap rung.
func New(o Options) *Rung { return &Rung{opts: o} }

func (r *Rung) Name() string             { return sandbox.RungBwrap }
func (r *Rung) Isolation() sandbox.Level { return sandbox.LevelNamespaced }

func (r *Rung) bwrapPath() (string, error) {
	name := r.opts.Bwrap
	if name == "" {
		name = "bwrap"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("bubblewrap not found (%w); install it (apt-get install bubblewrap)", err)
	}
	return p, nil
}

func (r *Rung) helperPath() (string, error) {
	if r.opts.Helper != "" {
		return r.opts.Helper, nil
	}
	r.helperOnce.Do(func() { r.helper, r.helperErr = DefaultHelper() })
	return r.helper, r.helperErr
}

func (r *Rung) host() limits.Host {
	if r.opts.Host != nil {
		return *r.opts.Host
	}
	return limits.ThisHost()
}

// probeArgs runs `true` in new namespaces over the host's system
// directories only, as a sandbox without an image sees them. Not the whole
// host tree (`--ro-bind / /`): bwrap remounts every submount of a
// recursive bind read-only, and one that another sandbox unmounts
// meanwhile (an overlay, a tmpfs) fails the probe, and with it the run.
func probeArgs() []string {
	a := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}
	for _, d := range hostSystemDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink("/" + d); err == nil {
				a = append(a, "--symlink", target, "/"+d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", "/"+d, "/"+d)
		}
	}
	return append(a, "--proc", "/proc", "--dev", "/dev", "--", "true")
}

// Probe runs `bwrap --unshare-all … true` to check that namespaces can be
// created here (they cannot in some containers, or with AppArmor's
// unprivileged-userns restriction).
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: r.Name(), Isolation: r.Isolation()}
	bw, err := r.bwrapPath()
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	if _, err := r.helperPath(); err != nil {
		p.Reason = err.Error()
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []byte
	for try := range 2 {
		// Twice: mounts coming and going on a busy host can fail one
		// bwrap, which must not make the rung look broken for a run.
		cmd := exec.CommandContext(ctx, bw, probeArgs()...)
		cmd.Env = []string{}
		if out, err = cmd.CombinedOutput(); err == nil || try == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.Reason = fmt.Sprintf("%s cannot create namespaces here: %v: %s", bw, err, strings.TrimSpace(string(out)))
		return p
	}
	p.Works = true
	p.Reason = "bubblewrap at " + bw + " creates namespaces"
	if v, err := exec.CommandContext(ctx, bw, "--version").Output(); err == nil {
		p.Reason = strings.TrimSpace(string(v)) + " at " + bw + " creates namespaces"
	}
	if os.Geteuid() != 0 {
		p.Reason += "; not root: image roots are copied instead of overlay-mounted"
	}
	return p
}

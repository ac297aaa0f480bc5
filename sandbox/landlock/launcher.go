package landlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/bridge"
	"evals.si/sandbox/internal/execuser"
	"evals.si/sandbox/reexec"
)

// Re-exec helper names.
const (
	launcherName   = "landlock-exec"
	restricterName = "landlock-restrict"
	probeName      = "landlock-probe"
)

func init() {
	reexec.Register(launcherName, launch)
	reexec.Register(restricterName, restrict)
	reexec.Register(probeName, func([]string) int { return 0 })
}

// launch is the launcher: fd 3 carries the spec, fd 4 takes the status.
// The holder starts it in the sandbox's namespaces (its root is the
// sandbox's) with a PID and mount namespace of its own: it mounts that
// PID namespace's /proc, resolves the command's user, starts the
// restricter, waits, then kills whatever the command left behind.
func launch([]string) int {
	cloexecFrom3()
	specF := os.NewFile(3, "spec")
	statF := os.NewFile(4, "status")
	report := func(st status) int {
		json.NewEncoder(statF).Encode(st)
		statF.Close()
		return 0
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	var sp spec
	err := json.NewDecoder(specF).Decode(&sp)
	specF.Close()
	if err != nil {
		return report(status{SetupErr: "reading launcher spec: " + err.Error()})
	}
	cgroupFiles := make([]*os.File, len(sp.CgroupFDs))
	for i, fd := range sp.CgroupFDs {
		cgroupFiles[i] = os.NewFile(uintptr(fd), "cgroup.procs")
	}
	// We are init of the command's PID namespace: orphans of the command
	// reparent to us.
	if err := mountProc(); err != nil {
		return report(status{SetupErr: err.Error()})
	}
	if sp.File != nil {
		return report(doFile(sp))
	}
	if sp.User != "" {
		c, err := resolveUser(sp.User)
		if err == nil {
			err = execuser.CheckMapped(sp.User, c.UID, append([]int{c.GID}, c.Groups...))
		}
		if err != nil {
			return report(status{SetupErr: err.Error()})
		}
		sp.Cred = &c
		if !sp.KeepHome {
			sp.Env = setEnv(sp.Env, "HOME", c.Home)
		}
	}

	specR, specW, err := os.Pipe()
	if err != nil {
		return report(status{SetupErr: err.Error()})
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return report(status{SetupErr: err.Error()})
	}
	// The restricter sends the seccomp filter's listener over this pair.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return report(status{SetupErr: "socketpair: " + err.Error()})
	}
	listenerW := os.NewFile(uintptr(pair[1]), "seccomp-listener")
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{reexec.Env + "=" + restricterName}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{specR, errW, listenerW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	specR.Close()
	errW.Close()
	listenerW.Close()
	if err != nil {
		unix.Close(pair[0])
		return report(status{SetupErr: "starting restricter: " + err.Error()})
	}
	// It waits for its spec: it (and so the command) joins the command's
	// cgroup before anything runs.
	for _, f := range cgroupFiles {
		_, err := f.Write([]byte(strconv.Itoa(cmd.Process.Pid)))
		f.Close()
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			unix.Close(pair[0])
			return report(status{SetupErr: "moving the command into its cgroup: " + err.Error()})
		}
	}
	stop := make(chan struct{})
	supDone := make(chan *supervisor, 1)
	go func() {
		defer unix.Close(pair[0])
		fd, err := recvFD(pair[0])
		if err != nil {
			supDone <- nil // the restricter failed first; it says why
			return
		}
		defer unix.Close(fd)
		sup := supervise(fd, "/proc", sp.ProxyPort, sp.Network == sandbox.NetworkAllowlist)
		sup.run(stop)
		supDone <- sup
	}()
	go func() {
		json.NewEncoder(specW).Encode(sp)
		specW.Close()
	}()
	os.Stdin.Close()
	os.Stdout.Close()
	os.Stderr.Close()
	// The restricter's error pipe is close-on-exec: EOF with nothing
	// written means the command was exec'd, which a service's starter
	// waits for (so a bad user or workdir is StartService's error).
	setupErrC := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(errR)
		errR.Close()
		if len(b) == 0 && sp.Service {
			json.NewEncoder(statF).Encode(status{Started: true})
		}
		setupErrC <- b
	}()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var st status
	select {
	case <-done:
	case <-sigc:
		st.Stopped = true
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Process.Kill()
		<-done
	}
	setupErr := <-setupErrC
	st.Killed = sweep()
	close(stop)
	if sup := <-supDone; sup != nil {
		st.Denials = sup.denials()
	}
	if len(setupErr) > 0 {
		st.SetupErr = string(setupErr)
		return report(st)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		st.ExitCode = exitStatus(ws)
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
		}
	}
	return report(st)
}

// mountProc mounts the launcher's PID namespace's /proc over the holder's
// (in the launcher's own copy of the mount namespace), read-only as a
// whole with sandbox.MaskedPaths hidden, so the command sees its own
// processes only.
func mountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return maskPaths("/", "/proc/")
}

// setEnv sets k=v in env, replacing any k.
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

// sweep SIGKILLs every other process of the sandbox's PID namespace (kill
// -1 from its init) until none is left, reaping them, and returns how many
// it reaped.
func sweep() int {
	if os.Getpid() != 1 {
		// kill(-1) outside a PID namespace of its own would reach every
		// process this uid may signal on the host: never.
		return 0
	}
	n := 0
	for range 10000 {
		unix.Kill(-1, unix.SIGKILL)
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.ECHILD {
				return n
			}
			if pid <= 0 || err != nil {
				break
			}
			n++
		}
		time.Sleep(200 * time.Microsecond)
	}
	return n
}

// loopbackUp brings up lo, the only interface of the sandbox's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up loopback: SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// forward listens on listen in the sandbox's network namespace and relays
// each connection to the egress proxy's relay socket (sandbox/bridge), for
// as long as the launcher lives.
func forward(listen, relay string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening for the egress proxy on %s: %w", listen, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			go func() {
				up, err := net.Dial("unix", relay)
				if err != nil {
					c.Close()
					return
				}
				bridge.Splice(c, up)
			}()
		}
	}()
	return nil
}

var devFiles = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot assembles the sandbox root at sp.Root in the holder's private
// mount namespace (read-only, with ReadOnlyRoot, once the /etc files are
// bound: placeEtcFiles may need to create their mount points).
func buildRoot(sp spec) error {
	root := sp.Root
	lowers := make([]string, len(sp.Lowers))
	for i, l := range sp.Lowers {
		lowers[i] = escapeOverlay(l)
	}
	// userxattr: in a user namespace overlay keeps whiteouts and opaque
	// directories in user.overlay.* (trusted.* is the host root's).
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lowers, ":"), escapeOverlay(sp.Upper), escapeOverlay(sp.OvlWork))
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting overlay (%s): %w", opts, err)
	}
	if sp.SysDirs != nil {
		for _, d := range systemDirs {
			fi, err := os.Lstat(d)
			if err != nil {
				continue
			}
			dst := filepath.Join(root, d)
			if fi.Mode()&os.ModeSymlink != 0 {
				link, err := os.Readlink(d)
				if err != nil {
					return err
				}
				if _, err := os.Lstat(dst); err == nil {
					continue // made by an earlier command, kept in the upper dir
				}
				if err := os.Symlink(link, dst); err != nil {
					return err
				}
				continue
			}
			src, ok := sp.SysDirs[d]
			if !ok {
				continue
			}
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			if err := bindRO(src, dst); err != nil {
				return err
			}
		}
	}
	for _, b := range []struct{ src, dst string }{{sp.WorkSrc, sp.Workdir}, {sp.TmpSrc, "/tmp"}} {
		dst := filepath.Join(root, b.dst)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(b.src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s at %s: %w", b.src, b.dst, err)
		}
	}
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range devFiles {
		dst := filepath.Join(dev, d)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			os.Remove(dst)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	proc := filepath.Join(root, "proc")
	if err := os.MkdirAll(proc, 0o555); err != nil {
		return err
	}
	// The PID namespace's own proc, read-only as a whole: the root is
	// writable under Landlock, so sandbox.ReadOnlyPaths (/proc/sys,
	// /proc/sysrq-trigger, …) must be closed by the mount itself.
	if err := unix.Mount("proc", proc, "proc", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	return maskPaths(root, "/")
}

// pivotInto makes root the launcher's (and so the sandbox's) root and
// detaches everything else: the mount namespace, a copy of the host's,
// then holds only the sandbox's mounts, so /proc/self/mounts lists no host
// path.
func pivotInto(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", "."): the old root ends up stacked over the new one,
	// and unmounting "." detaches it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's mounts: %w", err)
	}
	return unix.Chdir("/")
}

// maskPaths hides sandbox.MaskedPaths starting with prefix that exist
// below root: a file under /dev/null, a directory under an empty read-only
// tmpfs.
func maskPaths(root, prefix string) error {
	for _, p := range sandbox.MaskedPaths {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		dst := filepath.Join(root, p)
		fi, err := os.Lstat(dst)
		if err != nil {
			continue // absent here (no /sys at all, say)
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = unix.Mount("/dev/null", dst, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("masking %s: %w", p, err)
		}
	}
	return nil
}

// escapeOverlay escapes the characters overlay's option parser splits on.
func escapeOverlay(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`)
	return r.Replace(p)
}

// bindRO bind-mounts src at dst read-only.
func bindRO(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|lockedFlags(src), ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", dst, err)
	}
	return nil
}

// lockedFlags returns the mount flags of the mount holding p that a
// remount inside a user namespace must keep.
func lockedFlags(p string) uintptr {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return 0
	}
	var f uintptr
	for _, m := range []struct{ st, ms int64 }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if st.Flags&m.st != 0 {
			f |= uintptr(m.ms)
		}
	}
	return f
}

// restrict is the restricter: fd 3 carries the spec; fd 4 (close-on-exec)
// takes a setup error. It chroots, restricts itself and execs the command.
func restrict([]string) int {
	specF := os.NewFile(3, "spec")
	errF := os.NewFile(4, "setup-error")
	syscall.CloseOnExec(4)
	syscall.CloseOnExec(5) // the launcher's end for the seccomp listener
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errF, format, args...)
		return 125
	}
	var sp spec
	err := json.NewDecoder(specF).Decode(&sp)
	specF.Close()
	if err != nil {
		return fail("reading restricter spec: %v", err)
	}
	// Everything below must happen on one thread: seccomp and the
	// capability sets are per thread, and execve runs from this one.
	runtime.LockOSThread()

	capLast := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			capLast = n
		}
	}
	if err := unix.Chroot(sp.Root); err != nil {
		return fail("chroot %s: %v", sp.Root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fail("chdir /: %v", err)
	}
	if err := unix.Chdir(sp.Cwd); err != nil {
		return fail("working directory %s: %v", sp.Cwd, err)
	}
	path, err := lookPath(sp.Argv[0], sp.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", sp.Argv[0], err)
		return 127
	}
	argv0p, err := unix.BytePtrFromString(path)
	if err != nil {
		return fail("command path: %v", err)
	}
	argvp, err := cStrings(sp.Argv)
	if err != nil {
		return fail("argv: %v", err)
	}
	envp, err := cStrings(sp.Env)
	if err != nil {
		return fail("environment: %v", err)
	}

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs: %v", err)
	}
	if err := applyLandlock(sp); err != nil {
		return fail("applying landlock: %v", err)
	}
	listener, err := installSeccomp(sp.Network != sandbox.NetworkAllow)
	if err != nil {
		return fail("installing seccomp filter: %v", err)
	}
	// The launcher answers the filter's notifications (notify.go).
	if err := sendFD(5, listener); err != nil {
		return fail("passing the seccomp listener to the launcher: %v", err)
	}
	unix.Close(listener)
	unix.Close(5)
	keep, err := capSet(sp.Caps)
	if err != nil {
		return fail("%v", err)
	}
	if err := limitCaps(capLast, keep, sp.Cred); err != nil {
		return fail("limiting capabilities: %v", err)
	}
	// The command gets stdin, stdout and stderr only, whatever reached
	// this process without close-on-exec.
	if err := cloexecFrom3(); err != nil {
		return fail("marking descriptors close-on-exec: %v", err)
	}
	// Limits last: RLIMIT_AS can be below what this Go process already
	// maps, so nothing may allocate between here and execve.
	if sp.FSizeBytes > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: sp.FSizeBytes, Max: sp.FSizeBytes}); err != nil {
			return fail("RLIMIT_FSIZE: %v", err)
		}
	}
	if sp.MemoryBytes > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: sp.MemoryBytes, Max: sp.MemoryBytes}); err != nil {
			return fail("RLIMIT_AS: %v", err)
		}
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0p)),
		uintptr(unsafe.Pointer(&argvp[0])),
		uintptr(unsafe.Pointer(&envp[0])))
	// execve failed: a command problem (exit 126/127 as a shell would), not
	// a sandbox failure.
	fmt.Fprintf(os.Stderr, "%s: %v\n", sp.Argv[0], errno)
	if errno == unix.ENOENT {
		return 127
	}
	return 126
}

// closeRangeCloexec is CLOSE_RANGE_CLOEXEC (linux/close_range.h).
const closeRangeCloexec = 1 << 2

// cloexecFrom3 marks every descriptor from 3 on close-on-exec. Go opens
// its own so, but a process keeps what it inherited without the flag (a
// pipe or socket from the engine's parent), and each helper passes on only
// what it names: the holder, launchers and the command get nothing else.
func cloexecFrom3() error { return unix.CloseRange(3, math.MaxUint32, closeRangeCloexec) }

// lookPath resolves a command name with the command's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

// landlockConfigs indexes go-landlock's configurations by ABI version.
var landlockConfigs = []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}

// applyLandlock restricts the whole process (and so the command after
// execve) to the sandbox's filesystem and network rules. No best-effort
// downgrade: a rule the kernel cannot enforce is an error.
func applyLandlock(sp spec) error {
	if sp.ABI < 1 || sp.ABI >= len(landlockConfigs) {
		return fmt.Errorf("unsupported landlock ABI %d", sp.ABI)
	}
	cfg := landlockConfigs[sp.ABI]
	// No TCP rules: the sandbox's network namespace holds only loopback
	// (and, for allowlist and allow, the forwarder on it), which is the
	// boundary; commands and services bind and reach loopback ports as in
	// a container with network none. Landlock's rules name ports, not
	// addresses, so they could not allow loopback alone.
	cfg.HandledAccessNet = 0
	rw := func(r landlock.FSRule) landlock.FSRule {
		if sp.ABI >= 2 {
			return r.WithRefer()
		}
		return r
	}
	rules := []landlock.Rule{
		landlock.RODirs("/proc"),
		rw(landlock.RWDirs(sp.Workdir, "/tmp")),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty").IgnoreIfMissing(),
		landlock.ROFiles("/dev/random", "/dev/urandom").IgnoreIfMissing(),
	}
	// The root: read-only, or writable where its mounts allow (the system
	// directories and /proc are read-only mounts, /dev a throwaway tmpfs).
	if sp.ReadOnlyRoot {
		rules = append(rules, landlock.RODirs("/"))
	} else {
		rules = append(rules, rw(landlock.RWDirs("/")))
	}
	return cfg.Restrict(rules...)
}

// capNumbers are the numbers of the capabilities a sandbox may keep
// (sandbox.ContainerCapabilities).
var capNumbers = map[string]uintptr{
	"CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
	"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_MKNOD": unix.CAP_MKNOD,
	"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_SETFCAP": unix.CAP_SETFCAP,
	"CAP_SETGID": unix.CAP_SETGID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_SETUID": unix.CAP_SETUID, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
}

// capSet turns capability names into a set of numbers.
func capSet(names []string) (map[uintptr]bool, error) {
	set := map[uintptr]bool{}
	for _, n := range names {
		c, ok := capNumbers[n]
		if !ok {
			return nil, fmt.Errorf("unknown capability %s", n)
		}
		set[c] = true
	}
	return set, nil
}

// limitCaps narrows the calling thread to keep: the bounding set loses
// every other capability, ambient is cleared, the thread becomes c (when
// set), and permitted, effective and inheritable become keep, which uid 0
// (of the sandbox's namespace) then holds after execve; any other uid
// holds none, as a non-root user in a container (switching every uid away
// from 0 clears them, and no_new_privs keeps file capabilities and setuid
// bits from granting any). These are capabilities in the sandbox's user
// namespace only; outside it, its root is an unprivileged uid.
func limitCaps(last int, keep map[uintptr]bool, c *cred) error {
	for c := 0; c <= last; c++ {
		if keep[uintptr(c)] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if c != nil {
		if err := setCred(*c); err != nil {
			return err
		}
		if c.UID != 0 {
			keep = nil
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for c := range keep {
		data[c/32].Permitted |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Effective, data[i].Inheritable = data[i].Permitted, data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// cStrings makes a NULL-terminated array of C strings for execve.
func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, len(ss)+1)
	for i, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

package landlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// It runs in its own mount namespace, builds the root, starts the
// restricter, waits, then kills whatever the command left behind.
func launch([]string) int {
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
	// Join the command's cgroup before anything is started.
	for _, f := range sp.CgroupProcs {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return report(status{SetupErr: "joining cgroup: " + err.Error()})
		}
	}
	// Orphans of the command (double-forked daemons) reparent to us.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return report(status{SetupErr: "PR_SET_CHILD_SUBREAPER: " + err.Error()})
	}
	if err := buildRoot(sp); err != nil {
		return report(status{SetupErr: "building sandbox root: " + err.Error()})
	}

	specR, specW, err := os.Pipe()
	if err != nil {
		return report(status{SetupErr: err.Error()})
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return report(status{SetupErr: err.Error()})
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{reexec.Env + "=" + restricterName}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{specR, errW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	specR.Close()
	errW.Close()
	if err != nil {
		return report(status{SetupErr: "starting restricter: " + err.Error()})
	}
	go func() {
		json.NewEncoder(specW).Encode(sp)
		specW.Close()
	}()
	os.Stdin.Close()
	os.Stdout.Close()
	os.Stderr.Close()

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
	setupErr, _ := io.ReadAll(errR)
	errR.Close()
	st.Killed = sweep()
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

// sweep SIGKILLs every remaining descendant until none is left, reaping
// them, and returns how many it killed.
func sweep() int {
	self := os.Getpid()
	killed := map[int]bool{}
	for range 10000 {
		reap()
		desc := descendants(self)
		if len(desc) == 0 {
			break
		}
		for _, p := range desc {
			unix.Kill(p, unix.SIGKILL)
			killed[p] = true
		}
		time.Sleep(200 * time.Microsecond)
	}
	reap()
	return len(killed)
}

func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// descendants lists the live (non-zombie) descendants of pid from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	zombie := map[int]bool{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may contain anything, so cut at the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
		if f[0] == "Z" || f[0] == "X" {
			zombie[p] = true
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !zombie[c] {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}

var devFiles = []string{"null", "zero", "full", "random", "urandom", "tty"}

// buildRoot assembles the sandbox root at sp.Root in the launcher's private
// mount namespace.
func buildRoot(sp spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	root := sp.Root
	lowers := make([]string, len(sp.Lowers))
	for i, l := range sp.Lowers {
		lowers[i] = escapeOverlay(l)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), escapeOverlay(sp.Upper), escapeOverlay(sp.OvlWork))
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting overlay (%s): %w", opts, err)
	}
	if sp.HostSys {
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
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			if err := bindRO(d, dst); err != nil {
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
	// Read-only: the root is writable under Landlock, so /proc/sys and
	// /proc/sysrq-trigger must be closed by the mount itself.
	if err := unix.Mount("proc", proc, "proc", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// In a user namespace without its own PID namespace a fresh proc
		// cannot be mounted; the host's is bound read-only instead.
		if err := bindRO("/proc", proc); err != nil {
			return fmt.Errorf("mounting /proc: %w", err)
		}
	}
	if sp.ReadOnlyRoot {
		if err := unix.Mount("", root, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|lockedFlags(root), ""); err != nil {
			return fmt.Errorf("making the root read-only: %w", err)
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
	if err := installSeccomp(sp.Network != sandbox.NetworkAllow); err != nil {
		return fail("installing seccomp filter: %v", err)
	}
	if err := dropCaps(capLast); err != nil {
		return fail("dropping capabilities: %v", err)
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
	if sp.Network == sandbox.NetworkAllow {
		cfg.HandledAccessNet = 0
	}
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
	if sp.Network == sandbox.NetworkAllowlist && sp.ProxyPort != 0 {
		rules = append(rules, landlock.ConnectTCP(sp.ProxyPort))
	}
	return cfg.Restrict(rules...)
}

// dropCaps empties the bounding, ambient, inheritable, permitted and
// effective capability sets of the calling thread.
func dropCaps(last int) error {
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
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

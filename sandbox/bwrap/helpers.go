package bwrap

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/bridge"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
)

// Re-exec helpers of the engine binary.
const (
	// helperInit runs inside the sandbox as /.evalsi/evalsi: it starts the
	// proxy forwarder, then execs the command.
	helperInit = "evalsi-bwrap-init"
	// helperForward listens on 127.0.0.1:3128 inside the sandbox and
	// forwards each connection to the egress proxy's unix socket; it lives
	// in sandbox/bridge, shared with the docker rung.
	helperForward = bridge.HelperForward
)

func init() {
	reexec.Register(helperInit, initMain)
}

func fail(helper string, err error) int {
	fmt.Fprintf(os.Stderr, "evalsi %s: %v\n", helper, err)
	return 125
}

// initMain: [--forward SOCK LISTEN] [--rlimit NAME=N]... -- ARGV...
func initMain(args []string) int {
	var sock, listen string
	var rls []limits.Rlimit
	for len(args) > 0 && args[0] != "--" {
		switch {
		case args[0] == "--forward" && len(args) >= 3:
			sock, listen = args[1], args[2]
			args = args[3:]
		case args[0] == "--rlimit" && len(args) >= 2:
			rl, err := limits.ParseRlimit(args[1])
			if err != nil {
				return fail(helperInit, err)
			}
			rls = append(rls, rl)
			args = args[2:]
		default:
			return fail(helperInit, fmt.Errorf("bad arguments at %q", args[0]))
		}
	}
	if len(args) < 2 {
		return fail(helperInit, fmt.Errorf("no command"))
	}
	argv := args[1:]
	if sock != "" {
		if err := startForwarder(sock, listen); err != nil {
			return fail(helperInit, err)
		}
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: command not found\n", argv[0])
		return 127
	}
	err = execWithRlimits(bin, argv, os.Environ(), rls)
	fmt.Fprintf(os.Stderr, "%s: %v\n", argv[0], err)
	return 126
}

// execWithRlimits sets rls and execs bin without allocating in between: a
// Go runtime already maps more address space than a typical RLIMIT_AS, so
// any allocation after setrlimit could fail. Everything execve needs is
// prepared first, the collector is stopped, and only raw syscalls follow.
func execWithRlimits(bin string, argv, env []string, rls []limits.Rlimit) error {
	argv0, err := syscall.BytePtrFromString(bin)
	if err != nil {
		return err
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	type raw struct {
		res int
		lim unix.Rlimit
	}
	raws := make([]raw, 0, len(rls))
	for _, rl := range rls {
		res, err := rl.Resource()
		if err != nil {
			return err
		}
		raws = append(raws, raw{res, unix.Rlimit{Cur: rl.Value, Max: rl.Value}})
	}
	runtime.GC()
	debug.SetGCPercent(-1)
	runtime.LockOSThread()
	for i := range raws {
		if _, _, e := syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, uintptr(raws[i].res), uintptr(unsafe.Pointer(&raws[i].lim)), 0, 0, 0); e != 0 {
			return fmt.Errorf("setting an rlimit: %w", e)
		}
	}
	_, _, e := syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	return e
}

// startForwarder starts the forwarder as a separate process (it must
// outlive this one's exec) and waits until it listens.
func startForwarder(sock, listen string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	self, err := reexec.Self()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, sock, listen)
	cmd.Env = []string{reexec.Env + "=" + helperForward}
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the proxy forwarder: %w", err)
	}
	w.Close()
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil {
		return fmt.Errorf("the proxy forwarder did not start: %w", err)
	}
	return nil
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) { bridge.Splice(a, b) }

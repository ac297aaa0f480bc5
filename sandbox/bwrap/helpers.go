package bwrap

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/bridge"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
)

// Re-exec helpers of the engine binary.
const (
	// helperInit runs inside the sandbox as /.evalsi/evalsi, started by
	// the exec server: it sets the command's address-space limit, which
	// the server (a Go runtime) cannot run under, makes a service's leader
	// a child subreaper, and execs the command.
	helperInit = "evalsi-bwrap-init"
)

func init() {
	reexec.RegisterEarly(helperInit, initMain)
}

func fail(helper string, err error) int {
	fmt.Fprintf(os.Stderr, "evalsi %s: %v\n", helper, err)
	return 125
}

// initMain: [--subreaper] [--rlimit NAME=N]... -- ARGV...
//
// --subreaper makes the process a child subreaper (PR_SET_CHILD_SUBREAPER,
// kept across execve) before it execs ARGV: a service's leader, so that
// whatever the service starts stays its descendant however it detaches
// (a daemon's double fork reparents to it, not to the exec server), which
// is what the sweep after each command spares (execproto.killLeftovers).
func initMain(args []string) int {
	var rls []limits.Rlimit
	for len(args) > 0 && args[0] != "--" {
		if args[0] == "--subreaper" {
			if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				return fail(helperInit, fmt.Errorf("making the service a child subreaper: %w", err))
			}
			args = args[1:]
			continue
		}
		if args[0] != "--rlimit" || len(args) < 2 {
			return fail(helperInit, fmt.Errorf("bad arguments at %q", args[0]))
		}
		rl, err := limits.ParseRlimit(args[1])
		if err != nil {
			return fail(helperInit, err)
		}
		rls = append(rls, rl)
		args = args[2:]
	}
	if len(args) < 2 {
		return fail(helperInit, fmt.Errorf("no command"))
	}
	argv := args[1:]
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "evalsi: execvp %s: %v\n", argv[0], err)
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

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) { bridge.Splice(a, b) }

package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/bridge"
	"evals.si/sandbox/reexec"
)

// The container's pid 1 is its keeper: while it runs, the container does.
// Commands hold Docker's default capabilities (CAP_KILL, CAP_SETUID), so
// they can signal any process in the container, the keeper's own uid
// included; only pid 1 is out of reach, because the kernel drops signals
// sent from inside a PID namespace to its init unless init handles them.
// So the keeper is init itself, handles no signal but SIGCHLD, and reaps
// the orphans that reparent to it (Docker's --init is not used: tini
// exits when its one child is killed).

// keeperScript is pid 1 without egress: a shell (which reaps whatever it
// is handed) restarting a sleep the commands may kill.
const keeperScript = `while :; do sleep infinity & wait; done`

// helperInit is pid 1 of an egress container: the proxy forwarder (see
// sandbox/bridge) as init. Arguments: SOCK LISTEN.
const helperInit = "evalsi-docker-init"

func init() { reexec.Register(helperInit, initMain) }

func initMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "evalsi docker init: usage: SOCK LISTEN")
		return 125
	}
	// Catchable signals other than SIGCHLD are ignored, not handled, so
	// the kernel drops them before they reach pid 1 at all.
	for s := syscall.Signal(1); s < 32; s++ {
		if s != syscall.SIGCHLD && s != syscall.SIGKILL && s != syscall.SIGSTOP {
			signal.Ignore(s)
		}
	}
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		for range chld {
			for {
				var ws unix.WaitStatus
				if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
		}
	}()
	ln, err := net.Listen("tcp", args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "evalsi docker init:", err)
		return 125
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 125
			}
			continue // EMFILE and the like: keep serving
		}
		go func() {
			up, err := net.Dial("unix", args[0])
			if err != nil {
				fmt.Fprintln(os.Stderr, "evalsi proxy forwarder:", err)
				c.Close()
				return
			}
			bridge.Splice(c, up)
		}()
	}
}

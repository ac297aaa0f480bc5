// Package vmproc is what the microVM rungs' VMMs (sandbox/qemu,
// sandbox/firecracker) share about their VMM process: how it is started
// and reaped (Start), and its guest's serial console, kept on the host in
// a bounded log (Console).
package vmproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd so that it is killed (SIGKILL) when the engine dies,
// and reaps it: the channel gets cmd.Wait's result once the process has
// exited and its output has been copied.
//
// A VMM outliving the engine holds a guest nobody controls, its memory
// and its disks, until someone notices: the kernel's parent-death signal
// is the only thing that still acts when the engine is SIGKILLed or
// crashes. Its catch is that "parent" is the thread that forked, not the
// process: Go ends a thread when a goroutine locked to it exits, and a
// child forked from such a thread (or from any thread that a locked
// goroutine later takes and leaves) is killed although the engine lives.
// So Start forks from a goroutine it locks to its thread and keeps there,
// in cmd.Wait, for as long as the process runs: the thread cannot end
// before the process has, and no other goroutine can run on it. (Under
// the Firecracker jailer the signal covers the jailer's setup only: the
// kernel clears it when the jailer changes user, before it execs
// Firecracker; Kill remains the way a jailed machine ends.)
//
// cmd.SysProcAttr's other fields (Setpgid…) are kept.
func Start(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	waited := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, once the
		// process has been reaped (or has failed to start).
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		waited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return waited, nil
}

package execproto

import (
	"fmt"
	"syscall"
	"unsafe"
)

// A command's own Landlock domain keeps it out of every process outside
// the command: Landlock lets a process ptrace, open /proc/PID/mem or
// /proc/PID/environ of, or pidfd_getfd from, only processes in its own
// domain or one nested in it. Commands and services all run as the same
// root, so without it a command could write code into a service's memory
// and have it fork processes, which as the service's descendants the sweep
// after each command spares. The domain restricts nothing else: it handles
// only the making of block devices and reparenting, allowed beneath /, which is
// everything. Refer must be handled and allowed: it is the one right every
// Landlock domain denies unless it does (a rename or link into another
// directory would fail with EXDEV; apt renames its downloads out of
// partial/), and on ABI 1, which cannot allow it, no domain is used.
// Services get none (nothing needs keeping out of commands).
// Without Landlock in the kernel the server runs commands without it and
// the host's report says so.

// Landlock's system calls have the same numbers on every architecture.
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446

	landlockRulePathBeneath      = 1
	landlockCreateRulesetVersion = 1 << 0
	landlockAccessMakeBlock      = 1 << 11
	landlockAccessRefer          = 1 << 13 // ABI 2
	commandDomainAccess          = landlockAccessMakeBlock | landlockAccessRefer
)

// commandDomain returns a Landlock ruleset descriptor for commands'
// domains, or -1 when the kernel has no Landlock.
func commandDomain() (int, error) {
	abi, _, e := syscall.RawSyscall(sysLandlockCreateRuleset, 0, 0, landlockCreateRulesetVersion)
	if e == syscall.ENOSYS || e == syscall.EOPNOTSUPP || (e == 0 && abi < 2) {
		return -1, nil
	}
	attr := struct{ handledFS uint64 }{commandDomainAccess}
	fd, _, e := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e == syscall.ENOSYS || e == syscall.EOPNOTSUPP {
		return -1, nil
	}
	if e != 0 {
		return -1, fmt.Errorf("creating the commands' Landlock ruleset: %w", e)
	}
	root, err := syscall.Open("/", oPath|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(int(fd))
		return -1, fmt.Errorf("creating the commands' Landlock ruleset: %w", err)
	}
	defer syscall.Close(root)
	// struct landlock_path_beneath_attr is packed: u64, then s32.
	var rule [12]byte
	*(*uint64)(unsafe.Pointer(&rule[0])) = commandDomainAccess
	*(*int32)(unsafe.Pointer(&rule[8])) = int32(root)
	if _, _, e := syscall.RawSyscall6(sysLandlockAddRule, fd, landlockRulePathBeneath, uintptr(unsafe.Pointer(&rule[0])), 0, 0, 0); e != 0 {
		syscall.Close(int(fd))
		return -1, fmt.Errorf("adding the commands' Landlock rule: %w", e)
	}
	syscall.CloseOnExec(int(fd))
	return int(fd), nil
}

// enterDomain puts the calling thread (the command's forking thread, which
// ends right after the fork) in a new Landlock domain from ruleset. It
// needs no_new_privs, which bwrap sets on the server.
func enterDomain(ruleset int) error {
	if _, _, e := syscall.RawSyscall(sysLandlockRestrictSelf, uintptr(ruleset), 0, 0); e != 0 {
		return fmt.Errorf("entering the command's Landlock domain: %w", e)
	}
	return nil
}

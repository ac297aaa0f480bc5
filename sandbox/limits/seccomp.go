package limits

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a small classic-BPF program, assembled here so the
// rung needs no libseccomp. It inspects struct seccomp_data:
//
//	offset 0  int nr        the syscall number
//	offset 4  u32 arch      AUDIT_ARCH_*
//	offset 16 u64 args[0]   low 32 bits first (little-endian hosts only)
//
// and refuses syscalls that let a process reach past its namespaces
// (ptrace, mounts, kernel modules and kexec, bpf, perf, keyrings, joining or
// creating user namespaces, io_uring which bypasses seccomp for the
// operations it performs), returns ENOSYS for clone3 (its flags live behind
// a pointer a filter cannot read, so libc falls back to clone, whose flags
// we check), and allows the rest. Syscalls of a foreign architecture (and
// the x32 ABI) are refused outright.
//
// With Notify, the refusals go to a supervisor instead (SECCOMP_RET_USER_NOTIF)
// so that each becomes visible: it answers EPERM, as the plain filter does,
// and records the attempt. Outbound network calls that name a destination
// (connect, sendto with an address, sendmsg, sendmmsg) go to it as well, to
// be recorded when they aim past loopback; the network namespace, which has
// only lo, refuses those whatever the supervisor answers.

const (
	bpfLdWAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJsetK  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRetK   = unix.BPF_RET | unix.BPF_K

	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retNotify = unix.SECCOMP_RET_USER_NOTIF
)

type syscallName struct {
	nr   uintptr
	name string
}

// deniedSyscalls are refused with EPERM on every architecture.
var deniedSyscalls = []syscallName{
	{unix.SYS_PTRACE, "ptrace"}, {unix.SYS_PROCESS_VM_READV, "process_vm_readv"}, {unix.SYS_PROCESS_VM_WRITEV, "process_vm_writev"},
	{unix.SYS_MOUNT, "mount"}, {unix.SYS_UMOUNT2, "umount2"}, {unix.SYS_PIVOT_ROOT, "pivot_root"}, {unix.SYS_CHROOT, "chroot"},
	{unix.SYS_OPEN_TREE, "open_tree"}, {unix.SYS_MOVE_MOUNT, "move_mount"}, {unix.SYS_FSOPEN, "fsopen"}, {unix.SYS_FSCONFIG, "fsconfig"},
	{unix.SYS_FSMOUNT, "fsmount"}, {unix.SYS_FSPICK, "fspick"}, {unix.SYS_MOUNT_SETATTR, "mount_setattr"},
	{unix.SYS_KEXEC_LOAD, "kexec_load"}, {unix.SYS_KEXEC_FILE_LOAD, "kexec_file_load"}, {unix.SYS_INIT_MODULE, "init_module"},
	{unix.SYS_FINIT_MODULE, "finit_module"}, {unix.SYS_DELETE_MODULE, "delete_module"}, {unix.SYS_REBOOT, "reboot"},
	{unix.SYS_SWAPON, "swapon"}, {unix.SYS_SWAPOFF, "swapoff"}, {unix.SYS_ACCT, "acct"},
	{unix.SYS_BPF, "bpf"}, {unix.SYS_PERF_EVENT_OPEN, "perf_event_open"}, {unix.SYS_USERFAULTFD, "userfaultfd"},
	{unix.SYS_KEYCTL, "keyctl"}, {unix.SYS_ADD_KEY, "add_key"}, {unix.SYS_REQUEST_KEY, "request_key"},
	{unix.SYS_SETNS, "setns"}, {unix.SYS_OPEN_BY_HANDLE_AT, "open_by_handle_at"}, {unix.SYS_NAME_TO_HANDLE_AT, "name_to_handle_at"},
	{unix.SYS_IO_URING_SETUP, "io_uring_setup"}, {unix.SYS_IO_URING_ENTER, "io_uring_enter"}, {unix.SYS_IO_URING_REGISTER, "io_uring_register"},
	{unix.SYS_SYSLOG, "syslog"}, {unix.SYS_QUOTACTL, "quotactl"},
}

// networkSyscalls name a destination; the supervisor sees them with Notify.
var networkSyscalls = []syscallName{
	{unix.SYS_CONNECT, "connect"}, {unix.SYS_SENDTO, "sendto"}, {unix.SYS_SENDMSG, "sendmsg"}, {unix.SYS_SENDMMSG, "sendmmsg"},
}

// signalSyscalls aimed at PID 1 (the exec server, which takes no signal from
// commands) go to the supervisor with Notify, to be recorded; the call
// itself goes on as before (SIGKILL and SIGSTOP are dropped by the kernel,
// the rest by the server).
var signalSyscalls = []syscallName{
	{unix.SYS_KILL, "kill"}, {unix.SYS_TKILL, "tkill"}, {unix.SYS_TGKILL, "tgkill"},
	{unix.SYS_RT_SIGQUEUEINFO, "rt_sigqueueinfo"}, {unix.SYS_RT_TGSIGQUEUEINFO, "rt_tgsigqueueinfo"},
}

// DeniedSyscallNames lists what the filter refuses, for reports and docs.
func DeniedSyscallNames() []string {
	var out []string
	for _, s := range append(deniedSyscalls, archDenied...) {
		if !strings.HasPrefix(s.name, "io_uring_") {
			out = append(out, s.name)
		}
	}
	return append(out, "io_uring_*", "clone/unshare with CLONE_NEWUSER", "clone3 (ENOSYS)")
}

// SyscallName names syscall nr of this architecture for a denial ("" when
// the filter does not refuse or watch it).
func SyscallName(nr int) string {
	var all []syscallName
	for _, l := range [][]syscallName{deniedSyscalls, archDenied, networkSyscalls, signalSyscalls,
		{{unix.SYS_CLONE, "clone"}, {unix.SYS_UNSHARE, "unshare"}}} {
		all = append(all, l...)
	}
	for _, s := range all {
		if int(s.nr) == nr {
			return s.name
		}
	}
	return ""
}

// IsSignalSyscall says whether nr sends a signal: a notifying filter
// passes those aimed at PID 1 to its supervisor, which lets them go on.
func IsSignalSyscall(nr int) bool {
	for _, s := range signalSyscalls {
		if int(s.nr) == nr {
			return true
		}
	}
	return false
}

type insn struct {
	code   uint16
	k      uint32
	jt, jf string // labels; "" means the next instruction
	label  string // this instruction's label
}

// SeccompFilter returns the filter as the raw struct sock_filter array that
// bwrap --seccomp FD expects: refusals answer EPERM.
func SeccompFilter() ([]byte, error) { return seccompFilter(false) }

// SeccompNotifyFilter returns the filter with its refusals and outbound
// network calls passed to a supervisor (SECCOMP_RET_USER_NOTIF), which must
// answer refusals with EPERM; it is installed with
// SECCOMP_FILTER_FLAG_NEW_LISTENER. Without a listener the kernel answers
// ENOSYS: still a refusal.
func SeccompNotifyFilter() ([]byte, error) { return seccompFilter(true) }

func seccompFilter(notify bool) ([]byte, error) {
	refuse := "deny"
	if notify {
		refuse = "notify"
	}
	prog := []insn{
		{code: bpfLdWAbs, k: 4},
		{code: bpfJeqK, k: auditArch, jf: "deny"},
		{code: bpfLdWAbs, k: 0},
	}
	prog = append(prog, archPrologue()...)
	for _, s := range append(deniedSyscalls, archDenied...) {
		prog = append(prog, insn{code: bpfJeqK, k: uint32(s.nr), jt: refuse})
	}
	prog = append(prog,
		insn{code: bpfJeqK, k: unix.SYS_CLONE3, jt: "enosys"},
		insn{code: bpfJeqK, k: unix.SYS_CLONE, jt: "flags"},
		insn{code: bpfJeqK, k: unix.SYS_UNSHARE, jt: "flags"},
		insn{code: bpfJeqK, k: unix.SYS_SOCKET, jt: "family"},
	)
	if notify {
		prog = append(prog,
			insn{code: bpfJeqK, k: unix.SYS_CONNECT, jt: "notify"},
			insn{code: bpfJeqK, k: unix.SYS_SENDMSG, jt: "notify"},
			insn{code: bpfJeqK, k: unix.SYS_SENDMMSG, jt: "notify"},
			insn{code: bpfJeqK, k: unix.SYS_SENDTO, jt: "sendto"},
		)
		for _, sc := range signalSyscalls {
			prog = append(prog, insn{code: bpfJeqK, k: uint32(sc.nr), jt: "pid1"})
		}
	}
	prog = append(prog,
		insn{code: bpfRetK, k: retAllow},
		// clone(flags, …) and unshare(flags): refuse new user namespaces.
		insn{label: "flags", code: bpfLdWAbs, k: 16},
		insn{code: bpfJsetK, k: unix.CLONE_NEWUSER, jt: refuse},
		insn{code: bpfRetK, k: retAllow},
		// socket(AF_VSOCK, …): vsock reaches the hypervisor (the host of
		// a microVM sandbox, or of a cloud VM the engine runs in) past
		// any network namespace; Docker's profile refuses it too.
		insn{label: "family", code: bpfLdWAbs, k: 16},
		insn{code: bpfJeqK, k: unix.AF_VSOCK, jt: refuse},
		insn{code: bpfRetK, k: retAllow},
	)
	if notify {
		prog = append(prog,
			// sendto(fd, buf, len, flags, addr, addrlen): with no address
			// (a connected socket, whose connect was seen) it is allowed.
			insn{label: "sendto", code: bpfLdWAbs, k: 16 + 4*8},
			insn{code: bpfJeqK, k: 0, jf: "notify"},
			insn{code: bpfLdWAbs, k: 16 + 4*8 + 4},
			insn{code: bpfJeqK, k: 0, jf: "notify"},
			insn{code: bpfRetK, k: retAllow},
			// A signal call whose first argument (pid, tid or tgid) is 1.
			insn{label: "pid1", code: bpfLdWAbs, k: 16},
			insn{code: bpfJeqK, k: 1, jf: "allow"},
			insn{code: bpfLdWAbs, k: 16 + 4},
			insn{code: bpfJeqK, k: 0, jt: "notify"},
			insn{label: "allow", code: bpfRetK, k: retAllow},
			insn{label: "notify", code: bpfRetK, k: retNotify},
		)
	}
	prog = append(prog,
		insn{label: "deny", code: bpfRetK, k: retEPERM},
		insn{label: "enosys", code: bpfRetK, k: retENOSYS},
	)
	labels := map[string]int{}
	for i, in := range prog {
		if in.label != "" {
			labels[in.label] = i
		}
	}
	off := func(i int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		d, ok := labels[label]
		if !ok || d <= i || d-i-1 > 255 {
			return 0, fmt.Errorf("seccomp filter: bad jump from %d to %q", i, label)
		}
		return uint8(d - i - 1), nil
	}
	out := make([]byte, 0, 8*len(prog))
	for i, in := range prog {
		jt, err := off(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(i, in.jf)
		if err != nil {
			return nil, err
		}
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, jt, jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out, nil
}

// InstallSeccompFilter puts this whole process (every thread, TSYNC) and
// everything it starts from then on under SeccompFilter, after setting
// no_new_privs, which an unprivileged process needs to install one: for a
// helper inside a sandbox whose runtime's own profile is weaker (the pod
// rung's, under the cluster's RuntimeDefault).
func InstallSeccompFilter() error {
	prog, err := SeccompFilter()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", e)
	}
	runtime.KeepAlive(prog)
	return nil
}

package limits

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a small classic-BPF program, assembled here so the
// rung needs no libseccomp. It inspects struct seccomp_data:
//
//	offset 0  int nr        the syscall number
//	offset 4  u32 arch      AUDIT_ARCH_*
//	offset 16 u64 args[0]   low 32 bits first (little-endian hosts only)
//
// and returns EPERM for syscalls that let a process reach past its
// namespaces (ptrace, mounts, kernel modules and kexec, bpf, perf, keyrings,
// joining or creating user namespaces, io_uring which bypasses seccomp for
// the operations it performs), ENOSYS for clone3 (its flags live behind a
// pointer a filter cannot read, so libc falls back to clone, whose flags we
// check), and allows the rest. Syscalls of a foreign architecture (and the
// x32 ABI) are refused outright.

const (
	bpfLdWAbs = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJgeK   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJsetK  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRetK   = unix.BPF_RET | unix.BPF_K

	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// deniedSyscalls are refused with EPERM on every architecture.
var deniedSyscalls = []uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE,
	unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_REBOOT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_SETNS, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_SYSLOG, unix.SYS_QUOTACTL,
}

// DeniedSyscallNames lists what the filter refuses, for reports and docs.
func DeniedSyscallNames() []string {
	return []string{"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2",
		"pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
		"fspick", "mount_setattr", "kexec_load", "kexec_file_load", "init_module",
		"finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "bpf",
		"perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "setns",
		"open_by_handle_at", "name_to_handle_at", "io_uring_*", "syslog", "quotactl",
		"clone/unshare with CLONE_NEWUSER", "clone3 (ENOSYS)"}
}

type insn struct {
	code   uint16
	k      uint32
	jt, jf string // labels; "" means the next instruction
	label  string // this instruction's label
}

// SeccompFilter returns the filter as the raw struct sock_filter array that
// bwrap --seccomp FD expects.
func SeccompFilter() ([]byte, error) {
	prog := []insn{
		{code: bpfLdWAbs, k: 4},
		{code: bpfJeqK, k: auditArch, jf: "deny"},
		{code: bpfLdWAbs, k: 0},
	}
	prog = append(prog, archPrologue()...)
	for _, nr := range append(deniedSyscalls, archDenied...) {
		prog = append(prog, insn{code: bpfJeqK, k: uint32(nr), jt: "deny"})
	}
	prog = append(prog,
		insn{code: bpfJeqK, k: unix.SYS_CLONE3, jt: "enosys"},
		insn{code: bpfJeqK, k: unix.SYS_CLONE, jt: "flags"},
		insn{code: bpfJeqK, k: unix.SYS_UNSHARE, jt: "flags"},
		insn{code: bpfRetK, k: retAllow},
		// clone(flags, …) and unshare(flags): refuse new user namespaces.
		insn{label: "flags", code: bpfLdWAbs, k: 16},
		insn{code: bpfJsetK, k: unix.CLONE_NEWUSER, jt: "deny"},
		insn{code: bpfRetK, k: retAllow},
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

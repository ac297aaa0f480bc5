package landlock

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
	offArg2 = 32
)

// auditArch is this build's native syscall architecture; other ABIs (i386
// via int 0x80, x32) are denied so their socketcall and numbering cannot
// bypass the filter.
func auditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// bpf is a tiny assembler with forward labels for classic BPF.
type bpf struct {
	prog   []unix.SockFilter
	fixups map[int][2]string // instruction → (true label, false label)
	labels map[string]int
}

func (b *bpf) stmt(code uint16, k uint32) {
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

// jeq jumps to t when A == k, else to f ("" means the next instruction).
func (b *bpf) jmp(code uint16, k uint32, t, f string) {
	b.fixups[len(b.prog)] = [2]string{t, f}
	b.prog = append(b.prog, unix.SockFilter{Code: code, K: k})
}

func (b *bpf) label(name string) { b.labels[name] = len(b.prog) }

func (b *bpf) assemble() ([]unix.SockFilter, error) {
	for i, l := range b.fixups {
		for j, name := range l {
			if name == "" {
				continue
			}
			target, ok := b.labels[name]
			if !ok || target <= i || target-i-1 > 255 {
				return nil, fmt.Errorf("bad bpf label %q", name)
			}
			if j == 0 {
				b.prog[i].Jt = uint8(target - i - 1)
			} else {
				b.prog[i].Jf = uint8(target - i - 1)
			}
		}
	}
	return b.prog, nil
}

const (
	ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	jeqK = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	jgeK = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	andK = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	retK = unix.BPF_RET | unix.BPF_K
)

// seccompProgram denies io_uring, ptrace and mounts always (Landlock
// already stops ptrace of processes outside the sandbox, and mounts; this
// closes ptrace inside too) and, with restrictNet, every socket(2) other
// than AF_UNIX, AF_NETLINK and plain TCP: Landlock's TCP rules do not see
// UDP (before ABI 10), MPTCP, SCTP or raw sockets. The refusals (and, with
// restrictNet, every connect) go to the launcher as user notifications
// (notify.go), which answers EPERM or EACCES and records them.
func seccompProgram(restrictNet bool) ([]unix.SockFilter, error) {
	arch, ok := auditArch()
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for GOARCH %s", runtime.GOARCH)
	}
	deny := unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
	const notify = unix.SECCOMP_RET_USER_NOTIF
	b := &bpf{fixups: map[int][2]string{}, labels: map[string]int{}}
	b.stmt(ldW, offArch)
	b.jmp(jeqK, arch, "native", "")
	b.stmt(retK, deny)
	b.label("native")
	b.stmt(ldW, offNr)
	b.jmp(jgeK, 0x40000000, "deny", "") // x32 syscall numbers
	b.jmp(jeqK, unix.SYS_IO_URING_SETUP, "nosys", "")
	for _, nr := range []uint32{unix.SYS_PTRACE, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_FSMOUNT, unix.SYS_OPEN_TREE} {
		b.jmp(jeqK, nr, "notify", "")
	}
	if restrictNet {
		b.jmp(jeqK, unix.SYS_SOCKET, "socket", "")
		b.jmp(jeqK, unix.SYS_CONNECT, "notify", "")
	}
	b.stmt(retK, unix.SECCOMP_RET_ALLOW)
	if restrictNet {
		b.label("socket")
		b.stmt(ldW, offArg0)
		b.jmp(jeqK, unix.AF_UNIX, "allow", "")
		b.jmp(jeqK, unix.AF_NETLINK, "allow", "")
		b.jmp(jeqK, unix.AF_INET, "inet", "")
		b.jmp(jeqK, unix.AF_INET6, "inet", "")
		b.stmt(retK, notify)
		b.label("inet")
		b.stmt(ldW, offArg1)
		b.stmt(andK, 0xf) // strip SOCK_NONBLOCK / SOCK_CLOEXEC
		b.jmp(jeqK, unix.SOCK_STREAM, "", "notify")
		b.stmt(ldW, offArg2)
		b.jmp(jeqK, 0, "allow", "")
		b.jmp(jeqK, unix.IPPROTO_TCP, "allow", "notify")
		b.label("allow")
		b.stmt(retK, unix.SECCOMP_RET_ALLOW)
	}
	b.label("notify")
	b.stmt(retK, notify)
	b.label("nosys")
	b.stmt(retK, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	b.label("deny")
	b.stmt(retK, deny)
	return b.assemble()
}

// installSeccomp installs the filter on the calling thread (no TSYNC: the
// thread is the one that execs the command) and returns its notification
// listener. no_new_privs must be set.
func installSeccomp(restrictNet bool) (int, error) {
	prog, err := seccompProgram(restrictNet)
	if err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

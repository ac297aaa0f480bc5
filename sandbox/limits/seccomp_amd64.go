package limits

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

var archDenied = []syscallName{{unix.SYS_IOPL, "iopl"}, {unix.SYS_IOPERM, "ioperm"}}

// archPrologue refuses the x32 ABI, whose syscall numbers have bit 30 set
// and would otherwise slip past the number comparisons.
func archPrologue() []insn {
	return []insn{{code: bpfJgeK, k: 0x40000000, jt: "deny"}}
}

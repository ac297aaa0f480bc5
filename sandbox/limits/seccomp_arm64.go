package limits

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

var archDenied []syscallName

func archPrologue() []insn { return nil }

package limits

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

var archDenied []uintptr

func archPrologue() []insn { return nil }

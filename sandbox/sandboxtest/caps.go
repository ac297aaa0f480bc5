package sandboxtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// capNumbers are the Linux numbers of sandbox.ContainerCapabilities.
var capNumbers = map[string]uint{
	"CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
	"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_MKNOD": unix.CAP_MKNOD,
	"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_SETFCAP": unix.CAP_SETFCAP,
	"CAP_SETGID": unix.CAP_SETGID, "CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_SETUID": unix.CAP_SETUID, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
}

// CapNames decodes a CapEff hex mask (from /proc/self/status) into sorted
// CAP_ names; a capability outside Docker's set shows as "unknown:MASK", so
// a comparison with sandbox.ContainerCapabilities catches any extra.
func CapNames(t testing.TB, hex string) []string {
	t.Helper()
	mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
	if err != nil {
		t.Fatalf("CapEff %q: %v", hex, err)
	}
	var out []string
	for name, n := range capNumbers {
		if mask&(1<<n) != 0 {
			out = append(out, name)
			mask &^= 1 << n
		}
	}
	if mask != 0 {
		out = append(out, fmt.Sprintf("unknown:%#x", mask))
	}
	slices.Sort(out)
	return out
}

package guest

// containerCaps are the Linux numbers of sandbox.ContainerCapabilities
// (Docker's default set), the only capabilities commands hold in a guest
// (caps_test.go checks the two agree). The guest does not import package
// sandbox: it is its own small binary.
var containerCaps = map[string]int{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4,
	"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
	"CAP_NET_BIND_SERVICE": 10, "CAP_NET_RAW": 13, "CAP_SYS_CHROOT": 18,
	"CAP_MKNOD": 27, "CAP_AUDIT_WRITE": 29, "CAP_SETFCAP": 31,
}

func keepCaps() []int {
	out := make([]int, 0, len(containerCaps))
	for _, n := range containerCaps {
		out = append(out, n)
	}
	return out
}

package sandbox

// What every rung gives a sandbox's root, modelled on what Docker gives a
// container by default (moby's OCI defaults), so setup steps and agents that
// work in `docker build` and `docker run` work here too, while root inside
// stays an unprivileged id outside (see Report.UIDMap).

// ContainerCapabilities are the capabilities commands hold inside their user
// namespace: Docker's default set. apt-get drops to _apt with setgroups and
// setresuid, useradd and chown change owners, pip writes as root.
var ContainerCapabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP",
	"CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// MaskedPaths are hidden inside every sandbox (a file bound over with
// /dev/null, a directory with an empty read-only tmpfs), as Docker masks
// them: they expose host kernel state or hardware.
var MaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
	"/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware",
}

// ReadOnlyPaths are mounted read-only inside every sandbox, as Docker does:
// /proc/sys holds global sysctls (kernel.core_pattern runs a program as
// host root), /proc/sysrq-trigger reboots the host.
var ReadOnlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// SubordinateIDs is the outside range a rung maps ids 0–65535 of a sandbox
// to when the engine runs as root and /etc/subuid names no range for it
// (rootless Podman's model: root inside is an unprivileged id outside). It
// is above what useradd hands out as subordinate ranges (SUB_UID_MAX
// 600100000; Docker's dockremap gets one of those) and above systemd's
// container range (524288–1879048191), so no user's own containers and no
// other engine's sandboxes share these ids and could signal a sandbox's
// processes.
const (
	SubordinateIDBase  = 0x70000000 // 1879048192
	SubordinateIDCount = 65536
)

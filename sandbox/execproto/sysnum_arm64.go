package execproto

// Syscall numbers package syscall lacks on this architecture.
const (
	sysSeccomp  = 277
	sysSendmmsg = 269
)

package execproto

// Syscall numbers package syscall lacks on this architecture.
const (
	sysSeccomp  = 317
	sysSendmmsg = 307
)

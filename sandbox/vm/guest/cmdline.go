// Package guest is evalsi-guest, the init (PID 1) of a microVM sandbox: it
// loads the guest's modules, switches to the root disk and serves the exec
// protocol (sandbox/execproto) over the VMM's control channel, one host
// session after another, for the machine's life. It is its own static
// binary, so it imports little.
package guest

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Control is the control channel the kernel command line names
// (evalsi.control=).
type Control struct {
	// Kind is "virtio-serial" (Name is the port's name) or "vsock" (Port
	// is the port the guest listens on).
	Kind string
	Name string
	Port uint32
}

// ParseControl reads evalsi.control= from a kernel command line.
func ParseControl(cmdline string) (Control, error) {
	v, ok := param(cmdline, "evalsi.control")
	if !ok {
		return Control{}, fmt.Errorf("the kernel command line names no control channel (evalsi.control=virtio-serial:NAME or vsock:PORT): %q", cmdline)
	}
	kind, arg, _ := strings.Cut(v, ":")
	switch kind {
	case "virtio-serial":
		if arg == "" || strings.Contains(arg, "/") {
			return Control{}, fmt.Errorf("evalsi.control=%s: want virtio-serial:NAME", v)
		}
		return Control{Kind: kind, Name: arg}, nil
	case "vsock":
		p, err := strconv.ParseUint(arg, 10, 32)
		if err != nil {
			return Control{}, fmt.Errorf("evalsi.control=%s: want vsock:PORT: %w", v, err)
		}
		return Control{Kind: kind, Port: uint32(p)}, nil
	}
	return Control{}, fmt.Errorf("evalsi.control=%s: unknown channel kind %q (want virtio-serial or vsock)", v, kind)
}

// param is the last value of key= on the command line (the kernel's rule:
// a later one wins).
func param(cmdline, key string) (string, bool) {
	v, ok := "", false
	for _, f := range strings.Fields(cmdline) {
		if val, found := strings.CutPrefix(f, key+"="); found {
			v, ok = val, true
		}
	}
	return v, ok
}

// ModuleName is the module name of a .ko path: dashes are underscores.
func ModuleName(p string) string {
	return strings.ReplaceAll(strings.TrimSuffix(path.Base(p), ".ko"), "-", "_")
}

// ModuleArgs are the parameters the command line gives module (its
// `<module>.<param>=value` words, as the kernel would pass a built-in
// module), space separated, for finit_module: virtio_mmio's
// virtio_mmio.device= words, which QEMU and Firecracker append for each
// device.
func ModuleArgs(cmdline, module string) string {
	module = strings.ReplaceAll(module, "-", "_")
	var out []string
	for _, f := range strings.Fields(cmdline) {
		mod, rest, ok := strings.Cut(f, ".")
		if !ok || rest == "" || strings.HasPrefix(rest, "=") || strings.ReplaceAll(mod, "-", "_") != module {
			continue
		}
		out = append(out, rest)
	}
	return strings.Join(out, " ")
}

package docker

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"

	"evals.si/sandbox"
	"evals.si/sandbox/bridge"
	"evals.si/sandbox/reexec"
)

// In-container paths of the engine binary and the egress proxy socket.
const (
	containerHelper    = "/.evalsi/evalsi"
	containerProxySock = "/.evalsi/proxy.sock"
)

// egress is what an allowlist container needs from the host: the engine
// binary to run as the forwarder and a unix socket relaying to the proxy.
type egress struct {
	sock string
	// ln is the host-side relay; dir holds its socket (removed at Close).
	ln  net.Listener
	dir string
}

func (e *egress) close() error {
	if e == nil {
		return nil
	}
	if e.ln != nil {
		e.ln.Close()
	}
	if e.dir != "" {
		return os.RemoveAll(e.dir)
	}
	return nil
}

// setupEgress makes the egress proxy reachable as a unix socket on the host
// that any uid may connect to, and checks that the engine binary can run
// inside the container.
func (r *Rung) setupEgress(cfg sandbox.Config, hostSys bool) (*egress, error) {
	helper, err := r.helper()
	if err != nil {
		return nil, err
	}
	if interp := elfInterpreter(helper); interp != "" && !hostSys {
		// A dynamically linked build needs the image's loader and libc; a
		// plain root can be checked, a daemon image cannot.
		if cfg.Root == "" {
			return nil, fmt.Errorf("network allowlist runs %s inside the image, but it is dynamically linked (%s); build evalsi with CGO_ENABLED=0", helper, interp)
		}
		if _, err := os.Stat(filepath.Join(cfg.Root, interp)); err != nil {
			return nil, fmt.Errorf("network allowlist runs %s inside the image, but it is dynamically linked (%s) and the image lacks that loader; build evalsi with CGO_ENABLED=0", helper, interp)
		}
	}
	// Always a relay of our own, even for a unix-socket proxy: the
	// forwarder runs as the container's remapped root, which the proxy's
	// socket may not admit.
	e := &egress{}
	parent := cfg.StateDir
	if len(parent) > 60 {
		parent = "" // unix socket paths are limited to 108 bytes
	}
	if parent != "" {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("making state directory: %w", err)
		}
	}
	dir, err := os.MkdirTemp(parent, "evalsi-docker-proxy-")
	if err != nil {
		return nil, fmt.Errorf("making proxy socket directory: %w", err)
	}
	e.dir = dir
	if e.ln, err = bridge.Relay(cfg.Policy.ProxyAddr, filepath.Join(dir, "proxy.sock")); err != nil {
		e.close()
		return nil, err
	}
	e.sock = filepath.Join(dir, "proxy.sock")
	return e, nil
}

// usesProxy says whether the sandbox's egress goes through the egress
// proxy: allowlist always, allow when the engine gives a proxy (in
// allow-all logging mode), since Docker's bridge reaches every address of
// the host but 127.0.0.1, and whatever the host's network reaches.
func usesProxy(p sandbox.Policy) bool {
	return p.Network == sandbox.NetworkAllowlist || (p.Network == sandbox.NetworkAllow && p.ProxyAddr != "")
}

// apply binds the socket into the container (Create binds the helper), runs the
// forwarder as the container's init (the keeper, see keeper.go) and points
// HTTP(S)_PROXY at it.
func (e *egress) apply(ccfg *container.Config, hcfg *container.HostConfig, env map[string]string, allowHosts []string) {
	hcfg.Mounts = append(hcfg.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: e.sock, Target: containerProxySock},
	)
	// The helper is chosen by a variable set for the forwarder alone (the
	// container's Env reaches every exec).
	ccfg.Cmd = []string{"/bin/sh", "-c", fmt.Sprintf("export %s=%s; exec %s %s %s",
		reexec.Env, helperInit, containerHelper, containerProxySock, bridge.Listen)}
	for k, v := range bridge.ProxyEnv(allowHosts) {
		env[k] = v
	}
}

// waitForwarder waits until the forwarder listens on 127.0.0.1:3128 (local
// address 0100007F:0C38 in state 0A, LISTEN, in /proc/net/tcp).
const waitForwarderScript = `i=0; while [ $i -lt 200 ]; do
while read -r sl local remote st rest; do [ "$local $st" = "0100007F:0C38 0A" ] && exit 0; done < /proc/net/tcp
i=$((i+1)); sleep 0.05; done; exit 1`

func (s *Sandbox) waitForwarder(ctx context.Context) error {
	out, code, err := s.run(ctx, []string{"/bin/sh", "-c", waitForwarderScript})
	if err == nil && code == 0 {
		return nil
	}
	return fmt.Errorf("the egress proxy forwarder did not start (exit %d: %v %s); container log: %s", code, err, strings.TrimSpace(out), s.logs(ctx))
}

// logs returns the tail of the container's output, for errors.
func (s *Sandbox) logs(ctx context.Context) string {
	rc, err := s.cli.ContainerLogs(ctx, s.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(unavailable: " + err.Error() + ")"
	}
	defer rc.Close()
	var b strings.Builder
	if _, err := stdcopy.StdCopy(&b, &b, rc); err != nil && !errors.Is(err, context.Canceled) && b.Len() == 0 {
		return "(unreadable: " + err.Error() + ")"
	}
	return strings.TrimSpace(b.String())
}

// elfInterpreter returns the program interpreter of an ELF executable, ""
// for a static one (or when it cannot be read).
func elfInterpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return ""
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// helper is the engine binary bound into every container as
// containerHelper: the proxy forwarder with egress, and the wrapper that
// makes a service's leader a child subreaper (service.go).
func (r *Rung) helper() (string, error) {
	if r.Helper != "" {
		return r.Helper, nil
	}
	return reexec.Self()
}

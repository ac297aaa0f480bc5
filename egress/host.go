package egress

import (
	"context"
	"fmt"
	"log/slog"
)

// Host starts egress proxies where the sandboxes are: in this process
// (Local), or in the sandbox pool a sandbox was leased from, whose proxies
// report their events back over the wire. The engine asks the host of the
// rung it uses, so a sandbox always reaches a proxy on its own machine.
type Host interface {
	StartProxy(ctx context.Context, pol Policy, onEvent func(Event)) (Handle, error)
}

// Handle is one running proxy.
type Handle interface {
	// Addr is what a sandbox's Policy.ProxyAddr names the proxy by:
	// "unix:/path" for a local proxy, an id of the pool's for a remote one.
	Addr() string
	// SetPolicy swaps what the proxy lets through (see Proxy.SetPolicy).
	SetPolicy(Policy) error
	Close() error
}

// Local starts proxies in this process, each with its socket in a
// directory of its own under SocketDir (empty: the system's temporary
// directory).
type Local struct {
	SocketDir string
	Logger    *slog.Logger
}

// StartProxy starts a proxy enforcing pol; its SocketDir, when empty, is
// the host's.
func (l Local) StartProxy(ctx context.Context, pol Policy, onEvent func(Event)) (Handle, error) {
	if pol.SocketDir == "" {
		pol.SocketDir = l.SocketDir
	}
	p := New(pol, l.Logger, onEvent)
	p.unixOnly = true
	if err := p.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting egress proxy: %w", err)
	}
	return localHandle{p}, nil
}

// localHandle names the proxy by its unix socket, which every rung can
// bring into a sandbox; it has no loopback TCP address.
type localHandle struct{ p *Proxy }

func (h localHandle) Addr() string               { return h.p.UnixAddr() }
func (h localHandle) SetPolicy(pol Policy) error { return h.p.SetPolicy(pol) }
func (h localHandle) Close() error               { return h.p.Close() }

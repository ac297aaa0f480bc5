package pool

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"evals.si/egress"
)

// poolPolicy is the proxy policy the pool runs for a client's: only what
// it lets through (hosts, allow-all) is the client's; the pool's own
// machine stays out of reach whatever a name resolves to
// (RefuseOwnMachine), and the proxy's limits and socket are the pool's.
func poolPolicy(req egress.Policy, ceiling []string) (egress.Policy, error) {
	if err := checkProxyPolicy(req); err != nil {
		return egress.Policy{}, err
	}
	if len(ceiling) > 0 {
		if req.AllowAll {
			return egress.Policy{}, fmt.Errorf("egress allow-all: this pool's sandboxes may reach only %s (sandboxd --allow-host)", strings.Join(ceiling, ", "))
		}
		for _, h := range req.AllowHosts {
			if !slices.ContainsFunc(ceiling, func(c string) bool { return withinCeiling(c, h) }) {
				return egress.Policy{}, fmt.Errorf("egress allow_hosts %q: not among the hosts this pool's sandboxes may reach (%s; sandboxd --allow-host)", h, strings.Join(ceiling, ", "))
			}
		}
	}
	return egress.Policy{AllowHosts: req.AllowHosts, AllowAll: req.AllowAll, RefuseOwnMachine: true}, nil
}

// checkProxyPolicy refuses a proxy policy that would let a sandbox reach
// the pool's own machine: its loopback holds other clients' proxies (their
// TCP listeners) and the pool's own services, so a client's allowlist may
// name neither localhost nor an address of this machine, and names may not
// resolve to private addresses. Locally the engine's machine is the spec
// author's to allow; in a pool it is everyone's.
func checkProxyPolicy(pol egress.Policy) error {
	if pol.AllowPrivate {
		return errors.New("egress allow_private: a pool proxy never lets names resolve to private addresses (the pool's machine and its network are not the client's)")
	}
	if pol.AllowAll {
		return nil // allow-all already refuses this machine
	}
	local, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("listing the pool's addresses: %w", err)
	}
	for _, hp := range pol.AllowHosts {
		host := hp
		if h, _, err := net.SplitHostPort(hp); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return fmt.Errorf("egress allow_hosts %q: the pool's own machine is not reachable from its sandboxes", hp)
		}
		ip := net.ParseIP(host)
		if ip == nil {
			continue
		}
		if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.Equal(net.IPv4bcast) || (ip.To4() != nil && ip.To4()[0] == 0) {
			return fmt.Errorf("egress allow_hosts %q: the pool's own machine is not reachable from its sandboxes", hp)
		}
		for _, a := range local {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return fmt.Errorf("egress allow_hosts %q: an address of the pool's machine is not reachable from its sandboxes", hp)
			}
		}
	}
	return nil
}

// withinCeiling says whether the allow_hosts entry h (host:port, or a
// "*.domain:port" wildcard) is covered by the ceiling entry c: the same
// host (or wildcard), or a name below a wildcard c, ignoring case and a
// trailing dot, on the same port, or on any port when c names none.
func withinCeiling(c, h string) bool {
	norm := func(host string) string { return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".") }
	hh, hp, err := net.SplitHostPort(h)
	if err != nil {
		hh, hp = h, ""
	}
	ch, cp, err := net.SplitHostPort(c)
	if err != nil {
		ch, cp = c, ""
	}
	if cp != "" && cp != hp {
		return false
	}
	ch, hh = norm(ch), norm(hh)
	if ch == hh {
		return true
	}
	// A wildcard ceiling covers the names (and narrower wildcards) below it.
	return strings.HasPrefix(ch, "*.") && strings.HasSuffix(strings.TrimPrefix(hh, "*"), ch[1:])
}

package egress

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Policy says which hosts the proxy lets through, and bounds what one
// sandbox can make it do.
type Policy struct {
	// AllowHosts are host:port entries. Hosts match exactly, ignoring case
	// and a trailing dot; "*.example.com:443" matches every subdomain of
	// example.com (a.example.com, a.b.example.com) on port 443 but not
	// example.com itself. IP literals match only the same literal
	// ("127.0.0.1:8000", "[::1]:8000"). Everything else is refused.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// AllowPrivate lets allowed host names resolve to loopback, private or
	// link-local addresses (any address NonPublic names), and under
	// AllowAll or RefuseOwnMachine lets private networks through. Off by
	// default: a public name that resolves to 127.0.0.1 (DNS rebinding)
	// must not reach services on the engine's host. Allowed IP literals and
	// "localhost" are taken at their word, since naming them is explicit,
	// except under RefuseOwnMachine.
	AllowPrivate bool `json:"allow_private,omitempty"`
	// AllowAll is network: allow through the proxy: every host:port gets
	// through except destinations on the engine's own machine (loopback,
	// link-local, unspecified, and the addresses of its own interfaces) and
	// on private networks (RFC 1918, CGNAT 100.64.0.0/10, unique local
	// IPv6, and every other range NonPublic names but those reserved for
	// tests and documentation; NAT64, 6to4 and IPv4-mapped addresses by the
	// IPv4 address they carry), checked on the addresses a name resolves
	// to, which are the ones dialled. The engine's machine and its network
	// are not the agent's: reach a private host with an allowlist naming
	// its address. AllowHosts is ignored. Every attempt is still reported.
	AllowAll bool `json:"allow_all,omitempty"`
	// RefuseOwnMachine refuses, in allowlist mode too, every destination
	// on the proxy's own machine and on private networks, as AllowAll
	// does: an allowed name or literal that is one of its addresses, or a
	// private network's, is refused. A sandbox pool sets it, since its
	// machine (other clients' proxies, its own services) and its network
	// are no client's to allow.
	RefuseOwnMachine bool `json:"refuse_own_machine,omitempty"`
	// SocketDir is where the proxy makes a directory of its own holding
	// its unix socket (egress.sock), so proxies sharing SocketDir never
	// share a socket; empty: the system's temporary directory. Close
	// removes the proxy's directory.
	SocketDir string `json:"socket_dir,omitempty"`
	// MaxConns bounds concurrent client connections over both listeners
	// (default 128); more wait in the listen backlog.
	MaxConns int `json:"max_conns,omitempty"`
	// DialTimeout bounds connecting upstream (default 10s).
	DialTimeout time.Duration `json:"dial_timeout,omitempty"`
	// IdleTimeout closes tunnels and keep-alive connections with no traffic
	// for this long (default 5m).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
}

const (
	defaultMaxConns    = 128
	defaultDialTimeout = 10 * time.Second
	defaultIdleTimeout = 5 * time.Minute
)

// rule is one parsed allow_hosts entry.
type rule struct {
	host     string // lower case, no trailing dot; for wildcards the suffix ".example.com"
	wildcard bool
	port     int
}

// Validate checks the allow_hosts entries.
func (p Policy) Validate() error {
	_, err := parseRules(p.AllowHosts)
	return err
}

func parseRules(entries []string) ([]rule, error) {
	rules := make([]rule, 0, len(entries))
	for _, e := range entries {
		host, port, err := splitHostPort(e)
		if err != nil {
			return nil, fmt.Errorf("allow_hosts entry %q: %w (write host:port, e.g. api.example.com:443 or 127.0.0.1:8000)", e, err)
		}
		r := rule{host: host, port: port}
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			if rest == "" || strings.Contains(rest, "*") {
				return nil, fmt.Errorf("allow_hosts entry %q: a wildcard is only allowed as a leading \"*.\" before a domain", e)
			}
			r.host, r.wildcard = "."+rest, true
		} else if strings.Contains(host, "*") {
			return nil, fmt.Errorf("allow_hosts entry %q: a wildcard is only allowed as a leading \"*.\"", e)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// splitHostPort splits and normalises host:port; the port is required.
func splitHostPort(hp string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("missing host")
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String() // one spelling per address
	}
	return host, port, nil
}

// allowed reports whether host:port (normalised) matches a rule.
func allowed(rules []rule, host string, port int) bool {
	for _, r := range rules {
		if r.port != port {
			continue
		}
		if r.wildcard {
			if strings.HasSuffix(host, r.host) && net.ParseIP(host) == nil {
				return true
			}
		} else if r.host == host {
			return true
		}
	}
	return false
}

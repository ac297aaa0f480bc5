package harbor

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"evals.si/dockerfile"
)

// PhaseNetwork is the network override [agent] and [verifier] may set
// (PhaseNetworkPolicyConfig): when network_mode is unset the phase keeps
// [environment]'s baseline.
type PhaseNetwork struct {
	NetworkMode  *string  `toml:"network_mode"`
	AllowedHosts []string `toml:"allowed_hosts"`
}

// policy is one phase's network as Harbor resolves it.
type policy struct {
	mode  string // public | no-network | allowlist
	hosts []string
}

// baseline is [environment]'s policy; allow_internet (deprecated) counts
// only when network_mode and allowed_hosts are both unset, as in
// TaskConfig.handle_deprecated_environment_allow_internet.
func baseline(mode *string, hosts []string, allowInternet *bool) (policy, error) {
	p := policy{mode: "public"}
	if mode != nil {
		p.mode = *mode
	} else if allowInternet != nil && hosts == nil && !*allowInternet {
		p.mode = "no-network"
	}
	p.hosts = hosts
	return p, p.validate("[environment]")
}

// phase is the policy of [agent] or [verifier]: its own when it sets
// network_mode, else the baseline.
func phase(name string, o PhaseNetwork, base policy) (policy, error) {
	if o.NetworkMode == nil {
		if o.AllowedHosts != nil {
			return policy{}, fmt.Errorf("[%s] allowed_hosts is only valid with network_mode = \"allowlist\"", name)
		}
		return base, nil
	}
	p := policy{mode: *o.NetworkMode, hosts: o.AllowedHosts}
	return p, p.validate("[" + name + "]")
}

func (p policy) validate(where string) error {
	switch p.mode {
	case "public", "no-network", "allowlist":
	default:
		return fmt.Errorf("%s network_mode = %q: Harbor knows public, no-network and allowlist", where, p.mode)
	}
	if p.mode != "allowlist" && len(p.hosts) > 0 {
		return fmt.Errorf("%s allowed_hosts is only valid with network_mode = \"allowlist\"", where)
	}
	return nil
}

// sandbox maps the policy to a sandbox network and allow_hosts, with a
// note when the mapping is partial.
func (p policy) sandbox() (mode string, hosts []string, note string, err error) {
	switch p.mode {
	case "no-network":
		return "deny", nil, "", nil
	case "allowlist":
		hosts, err := allowHosts(p.hosts)
		if err != nil {
			return "", nil, "", err
		}
		if len(hosts) == 0 {
			// Harbor's allow mode with no targets denies all egress.
			return "deny", nil, "", nil
		}
		return "allowlist", hosts, "allowed_hosts are reachable on ports 80 and 443 (Harbor's egress sidecar lets every TCP port through to them)", nil
	}
	return "allow", nil, "", nil
}

// hostLabel is Harbor's _NETWORK_HOST_LABEL_PATTERN.
var hostLabel = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// allowHosts turns Harbor's allowed_hosts (normalised and classified as
// _validate_allowed_host_names and classify_network_allowlist_entry do:
// hostnames, *.suffix wildcards, IP literals, CIDR ranges) into host:port
// entries of the egress allowlist, for both web ports. The allowlist names
// hosts and addresses, not ranges: a CIDR wider than one address is
// refused with that reason. Entries Harbor itself rejects are invalid.
//
// Loopback entries (localhost, 127.0.0.0/8, ::1) are dropped: in Harbor
// they are the container's own loopback, always reachable, as the
// sandbox's own is; through the egress proxy they would be this
// machine's. Link-local, unspecified and multicast addresses are refused:
// the allowlist never reaches them from here.
func allowHosts(entries []string) ([]string, error) {
	var out []string
	add := func(host string) {
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			return
		}
		for _, port := range []string{"443", "80"} {
			e := host + ":" + port
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	for _, raw := range entries {
		h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(raw)), ".")
		switch {
		case h == "":
			return nil, fmt.Errorf("allowed_hosts entry %q: entries must be non-empty hostnames", raw)
		case strings.Contains(h, "/"):
			pfx, err := netip.ParsePrefix(h)
			if err != nil || pfx.Masked() != pfx || strings.Contains(h, "%") {
				return nil, fmt.Errorf("allowed_hosts entry %q: not a hostname, IP address or CIDR range", raw)
			}
			if !pfx.IsSingleIP() {
				return nil, &dockerfile.RefusalError{Reason: fmt.Sprintf("allowed_hosts entry %q is an address range: the egress allowlist here names hosts and single addresses, not ranges", raw)}
			}
			if err := reachable(raw, pfx.Addr()); err != nil {
				return nil, err
			}
			add(hostPort(pfx.Addr()))
		case strings.Contains(h, ":") || strings.Count(h, ".") == 3 && isIPv4(h):
			a, err := netip.ParseAddr(h)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("allowed_hosts entry %q: not a hostname, IP address or CIDR range (no URLs, ports or paths)", raw)
			}
			if err := reachable(raw, a); err != nil {
				return nil, err
			}
			add(hostPort(a))
		default:
			name := h
			if rest, ok := strings.CutPrefix(h, "*."); ok {
				if _, err := netip.ParseAddr(rest); err == nil {
					return nil, fmt.Errorf("allowed_hosts entry %q: wildcards must target hostnames, not addresses", raw)
				}
				name = rest
			} else if strings.Contains(h, "*") {
				return nil, fmt.Errorf("allowed_hosts entry %q: wildcards must be a leading \"*.\"", raw)
			}
			for _, l := range strings.Split(name, ".") {
				if !hostLabel.MatchString(l) {
					return nil, fmt.Errorf("allowed_hosts entry %q: not a valid hostname", raw)
				}
			}
			add(h)
		}
	}
	return out, nil
}

// reachable refuses addresses the egress allowlist never reaches.
func reachable(raw string, a netip.Addr) error {
	a = a.Unmap()
	if a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() || a.IsInterfaceLocalMulticast() {
		return &dockerfile.RefusalError{Reason: fmt.Sprintf("allowed_hosts entry %q is an unspecified, link-local or multicast address, which the egress allowlist here does not reach", raw)}
	}
	return nil
}

func isIPv4(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.Is4()
}

// hostPort spells an address for host:port (IPv6 in brackets), "localhost"
// for a loopback one.
func hostPort(a netip.Addr) string {
	if a.Unmap().IsLoopback() {
		return "localhost"
	}
	if a.Is6() && !a.Is4In6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

package egress

import (
	"net"
	"net/netip"
)

// Which addresses are the public internet. The ranges are IANA's
// special-purpose registries (IPv4 and IPv6) less the few entries that are
// globally reachable anycast services: everything a sandbox could name to
// reach a machine's own services, its private networks (a cloud's VPC, a
// cluster's pods and services, a metadata endpoint) or an address a
// translator or tunnel on the path would turn into one of those.

// addrRange is one range that is not public internet.
type addrRange struct {
	prefix netip.Prefix
	why    string
	// forTests: reserved for tests and documentation (RFC 2544, RFC 5737
	// and their IPv6 counterparts). No network's services are reached
	// there, so network: allow lets them through; the test hosts of
	// internal/testenv/nethost live in 198.18.0.0/15.
	forTests bool
}

// v4Ranges and v6Ranges are read-only tables, searched in order (the
// broadcast address before 240.0.0.0/4, which holds it).
var v4Ranges = []addrRange{
	{prefix: netip.MustParsePrefix("0.0.0.0/8"), why: `"this network" (0.0.0.0/8, RFC 791)`},
	{prefix: netip.MustParsePrefix("10.0.0.0/8"), why: "private network (10.0.0.0/8, RFC 1918)"},
	{prefix: netip.MustParsePrefix("100.64.0.0/10"), why: "shared address space (100.64.0.0/10, RFC 6598: carrier-grade NAT, cloud providers' internal services)"},
	{prefix: netip.MustParsePrefix("127.0.0.0/8"), why: "loopback"},
	{prefix: netip.MustParsePrefix("169.254.0.0/16"), why: "link-local (169.254.0.0/16: metadata endpoints)"},
	{prefix: netip.MustParsePrefix("172.16.0.0/12"), why: "private network (172.16.0.0/12, RFC 1918)"},
	{prefix: netip.MustParsePrefix("192.0.0.0/24"), why: "IETF protocol assignments (192.0.0.0/24, RFC 6890: DS-Lite, NAT64 discovery, some clouds' metadata)"},
	{prefix: netip.MustParsePrefix("192.0.2.0/24"), why: "documentation (192.0.2.0/24, RFC 5737)", forTests: true},
	{prefix: netip.MustParsePrefix("192.168.0.0/16"), why: "private network (192.168.0.0/16, RFC 1918)"},
	{prefix: netip.MustParsePrefix("198.18.0.0/15"), why: "benchmarking (198.18.0.0/15, RFC 2544)", forTests: true},
	{prefix: netip.MustParsePrefix("198.51.100.0/24"), why: "documentation (198.51.100.0/24, RFC 5737)", forTests: true},
	{prefix: netip.MustParsePrefix("203.0.113.0/24"), why: "documentation (203.0.113.0/24, RFC 5737)", forTests: true},
	{prefix: netip.MustParsePrefix("224.0.0.0/4"), why: "multicast"},
	{prefix: netip.MustParsePrefix("255.255.255.255/32"), why: "broadcast"},
	{prefix: netip.MustParsePrefix("240.0.0.0/4"), why: "reserved (240.0.0.0/4, RFC 1112)"},
}

var v6Ranges = []addrRange{
	{prefix: netip.MustParsePrefix("::/96"), why: "IPv4-compatible (::/96, deprecated by RFC 4291)"},
	{prefix: netip.MustParsePrefix("64:ff9b:1::/48"), why: "local-use NAT64 (64:ff9b:1::/48, RFC 8215: translated to the operator's own IPv4 networks)"},
	{prefix: netip.MustParsePrefix("100::/64"), why: "discard-only (100::/64, RFC 6666)"},
	{prefix: netip.MustParsePrefix("2001::/32"), why: "Teredo tunnel (2001::/32, RFC 4380: its client address is an IPv4 address the tunnel reaches)"},
	{prefix: netip.MustParsePrefix("2001:2::/48"), why: "benchmarking (2001:2::/48, RFC 5180)", forTests: true},
	{prefix: netip.MustParsePrefix("2001:10::/28"), why: "ORCHID (2001:10::/28, deprecated by RFC 7343)"},
	{prefix: netip.MustParsePrefix("2001:db8::/32"), why: "documentation (2001:db8::/32, RFC 3849)", forTests: true},
	{prefix: netip.MustParsePrefix("3fff::/20"), why: "documentation (3fff::/20, RFC 9637)", forTests: true},
	{prefix: netip.MustParsePrefix("fc00::/7"), why: "unique local (fc00::/7, RFC 4193: private networks)"},
}

var (
	// nat64 is the well-known NAT64 prefix (RFC 6052): the last 32 bits
	// are the IPv4 address a translator on the path connects to.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// sixToFour addresses (RFC 3056) carry the IPv4 address of their relay
	// in bits 16 to 48.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// globalUnicast6 is the only IPv6 space IANA allocates for global
	// unicast; everything outside it that the tables above and the
	// special cases below do not name is reserved.
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
)

// NonPublic says why a is not an address of the public internet (for
// example "private network (10.0.0.0/8, RFC 1918)" or "NAT64 of 127.0.0.1:
// loopback"), or "" when it is one. An IPv4-mapped IPv6 address counts as
// its IPv4 address, and so do a NAT64 (64:ff9b::/96) or 6to4 (2002::/16)
// address as the IPv4 address it carries, since that is where a translator
// or relay on the path would connect. A zone is ignored.
func NonPublic(a netip.Addr) string {
	why, _ := classify(a)
	return why
}

// privateNetwork is NonPublic less the ranges reserved for tests and
// documentation: what network: allow refuses (a sandbox pool's allowlists
// too), since those ranges hold no network's services.
func privateNetwork(a netip.Addr) string {
	why, forTests := classify(a)
	if forTests {
		return ""
	}
	return why
}

// classify says why a is not public, and whether the range it is in is
// one reserved for testing and documentation.
func classify(a netip.Addr) (string, bool) {
	a = a.WithZone("")
	switch {
	case !a.IsValid():
		return "not an IP address", false
	case a.Is4In6():
		v4 := a.Unmap()
		if why, forTests := classify4(v4); why != "" {
			return "IPv4-mapped " + v4.String() + ": " + why, forTests
		}
		return "", false
	case a.Is4():
		return classify4(a)
	}
	switch {
	case a.IsUnspecified():
		return "unspecified address", false
	case a.IsLoopback():
		return "loopback", false
	case a.IsMulticast():
		return "multicast", false
	case a.IsLinkLocalUnicast():
		return "link-local (fe80::/10)", false
	case nat64.Contains(a):
		b := a.As16()
		return embedded("NAT64 of ", netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(a):
		b := a.As16()
		return embedded("6to4 relay ", netip.AddrFrom4([4]byte(b[2:6])))
	}
	for _, r := range v6Ranges {
		if r.prefix.Contains(a) {
			return r.why, r.forTests
		}
	}
	if !globalUnicast6.Contains(a) {
		return "reserved (outside the global unicast space 2000::/3)", false
	}
	return "", false
}

func classify4(a netip.Addr) (string, bool) {
	for _, r := range v4Ranges {
		if r.prefix.Contains(a) {
			return r.why, r.forTests
		}
	}
	return "", false
}

// embedded judges an address by the IPv4 address v4 it carries.
func embedded(what string, v4 netip.Addr) (string, bool) {
	why, forTests := classify4(v4)
	if why == "" {
		return "", false
	}
	return what + v4.String() + ": " + why, forTests
}

// addrOf is ip as a netip.Addr; IPv4 addresses, which net.IP holds in
// their 16-byte mapped form, come out as IPv4.
func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

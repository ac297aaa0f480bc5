package egress

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"evals.si/internal/testenv/nethost"
)

// Every range that is not the public internet, by an address at each of
// its ends and the addresses just outside it; embedded IPv4 addresses
// (IPv4-mapped, NAT64, 6to4) are judged as IPv4. want is a part of the
// reason ("" for a public address); private says whether network: allow
// refuses it too (everything but the ranges reserved for tests).
func TestNonPublic(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		want    string
		private bool
	}{
		// Public addresses stay public.
		{"8.8.8.8", "", false},
		{"1.1.1.1", "", false},
		{"2606:4700:4700::1111", "", false},
		{"2a00:1450:4001:80b::200e", "", false},

		{"0.0.0.0", "this network", true},
		{"0.255.255.255", "this network", true},
		{"1.0.0.0", "", false},
		{"9.255.255.255", "", false},
		{"10.0.0.0", "RFC 1918", true},
		{"10.255.255.255", "RFC 1918", true},
		{"11.0.0.0", "", false},
		{"100.63.255.255", "", false},
		{"100.64.0.0", "RFC 6598", true},
		{"100.100.100.200", "RFC 6598", true},
		{"100.127.255.255", "RFC 6598", true},
		{"100.128.0.0", "", false},
		{"126.255.255.255", "", false},
		{"127.0.0.1", "loopback", true},
		{"127.255.255.255", "loopback", true},
		{"128.0.0.0", "", false},
		{"169.253.255.255", "", false},
		{"169.254.169.254", "link-local", true},
		{"169.255.0.0", "", false},
		{"172.15.255.255", "", false},
		{"172.16.0.0", "RFC 1918", true},
		{"172.31.255.255", "RFC 1918", true},
		{"172.32.0.0", "", false},
		{"191.255.255.255", "", false},
		{"192.0.0.0", "192.0.0.0/24", true},
		{"192.0.0.192", "192.0.0.0/24", true},
		{"192.0.0.255", "192.0.0.0/24", true},
		{"192.0.1.0", "", false},
		{"192.0.1.255", "", false},
		{"192.0.2.0", "documentation", false},
		{"192.0.2.255", "documentation", false},
		{"192.0.3.0", "", false},
		{"192.167.255.255", "", false},
		{"192.168.0.0", "RFC 1918", true},
		{"192.168.255.255", "RFC 1918", true},
		{"192.169.0.0", "", false},
		{"198.17.255.255", "", false},
		{"198.18.0.0", "benchmarking", false},
		{"198.19.255.255", "benchmarking", false},
		{"198.20.0.0", "", false},
		{"198.51.99.255", "", false},
		{"198.51.100.0", "documentation", false},
		{"198.51.100.255", "documentation", false},
		{"198.51.101.0", "", false},
		{"203.0.112.255", "", false},
		{"203.0.113.0", "documentation", false},
		{"203.0.113.255", "documentation", false},
		{"203.0.114.0", "", false},
		{"223.255.255.255", "", false},
		{"224.0.0.1", "multicast", true},
		{"239.255.255.255", "multicast", true},
		{"240.0.0.0", "reserved", true},
		{"255.255.255.254", "reserved", true},
		{"255.255.255.255", "broadcast", true},

		// IPv4-mapped IPv6: the IPv4 address it carries.
		{"::ffff:127.0.0.1", "IPv4-mapped 127.0.0.1: loopback", true},
		{"::ffff:100.64.0.1", "IPv4-mapped 100.64.0.1: shared address space", true},
		{"::ffff:198.18.0.1", "benchmarking", false},
		{"::ffff:8.8.8.8", "", false},
		{"::fffe:ffff:ffff", "outside the global unicast space", true},
		{"::ffff:ffff", "IPv4-compatible", true},
		{"::1:0:0:0", "outside the global unicast space", true},

		// NAT64: the IPv4 address the translator connects to.
		{"64:ff9b::7f00:1", "NAT64 of 127.0.0.1: loopback", true},
		{"64:ff9b::a00:5", "NAT64 of 10.0.0.5: private network", true},
		{"64:ff9b::6440:1", "NAT64 of 100.64.0.1: shared address space", true},
		{"64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254: link-local", true},
		{"64:ff9b::c612:1", "NAT64 of 198.18.0.1: benchmarking", false},
		{"64:ff9b::808:808", "", false},
		{"64:ff9b::1:0:0", "outside the global unicast space", true},
		{"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "outside the global unicast space", true},
		{"64:ff9b:1::", "local-use NAT64", true},
		{"64:ff9b:1::808:808", "local-use NAT64", true},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "local-use NAT64", true},
		{"64:ff9b:2::", "outside the global unicast space", true},

		// 6to4: the IPv4 address of its relay.
		{"2002:a00:1::1", "6to4 relay 10.0.0.1: private network", true},
		{"2002:7f00:1::", "6to4 relay 127.0.0.1: loopback", true},
		{"2002:6440:1::", "6to4 relay 100.64.0.1: shared address space", true},
		{"2002:808:808::1", "", false},
		{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"2003::", "", false},

		// Teredo, the IETF blocks around it, documentation, benchmarking.
		{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"2001::", "Teredo", true},
		{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "Teredo", true},
		{"2001:1::1", "", false},
		{"2001:1:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"2001:2::", "benchmarking", false},
		{"2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking", false},
		{"2001:2:1::", "", false},
		{"2001:f:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"2001:10::", "ORCHID", true},
		{"2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "ORCHID", true},
		{"2001:20::", "", false},
		{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"2001:db8::", "documentation", false},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation", false},
		{"2001:db9::", "", false},
		{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", false},
		{"3fff::", "documentation", false},
		{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation", false},
		{"3fff:1000::", "", false},
		{"4000::", "outside the global unicast space", true},
		{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside the global unicast space", true},

		// Unique local, link-local and the reserved space around them.
		{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside the global unicast space", true},
		{"fc00::", "unique local", true},
		{"fd00::2", "unique local", true},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique local", true},
		{"fe00::", "outside the global unicast space", true},
		{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside the global unicast space", true},
		{"fe80::1", "link-local", true},
		{"fe80::1%eth0", "link-local", true},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local", true},
		{"fec0::", "outside the global unicast space", true},
		{"ff02::1", "multicast", true},

		// The rest of the special IPv6 addresses.
		{"::", "unspecified", true},
		{"::1", "loopback", true},
		{"::2", "IPv4-compatible", true},
		{"::a00:1", "IPv4-compatible", true},
		{"100::", "discard-only", true},
		{"100::ffff:ffff:ffff:ffff", "discard-only", true},
		{"100:0:0:1::", "outside the global unicast space", true},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			got := NonPublic(a)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("NonPublic(%s) = %q, want %q", tc.addr, got, tc.want)
			}
			if p := privateNetwork(a); (p != "") != tc.private {
				t.Errorf("privateNetwork(%s) = %q, want refused=%v", tc.addr, p, tc.private)
			}
			if ip := net.ParseIP(strings.Split(tc.addr, "%")[0]); isPublic(ip) != (tc.want == "") {
				t.Errorf("isPublic(%s) = %v, want %v", tc.addr, isPublic(ip), tc.want == "")
			}
		})
	}
	if got := NonPublic(netip.Addr{}); got == "" {
		t.Errorf("the zero Addr is public")
	}
}

// network: allow refuses another machine's address on a private network:
// a test host in the shared address space (CGNAT, where cloud metadata
// and VPC services live), by its literal, by NAT64, 6to4 and IPv4-mapped
// spellings of it, and by a name resolving to it; the refusals name the
// range, and the host sees no connection. A test host in the benchmarking
// range is still reached (TestAllowAllReachesOtherHosts), and so is this
// one once the policy allows private addresses.
func TestAllowAllRefusesPrivateNetworks(t *testing.T) {
	h := nethost.NewSharedSpace(t)
	host, port, _ := net.SplitHostPort(h.Addr)
	v4 := netip.MustParseAddr(host).As4()
	nat64 := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: v4[0], v4[1], v4[2], v4[3]})
	sixToFour := netip.AddrFrom16([16]byte{0x20, 0x02, v4[0], v4[1], v4[2], v4[3], 15: 1})
	dns := startDNS(t, net.ParseIP(host))

	ev := &events{}
	p := New(Policy{AllowAll: true, SocketDir: t.TempDir()}, nil, ev.add)
	p.resolver = dns.resolver()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(p, http.DefaultTransport.(*http.Transport), true)
	for _, target := range []string{
		h.Addr,
		net.JoinHostPort(nat64.String(), port),
		net.JoinHostPort(sixToFour.String(), port),
		"[::ffff:" + host + "]:" + port,
		"metadata.test:" + port,
	} {
		code, body, _ := get(t, c, "http://"+target+"/")
		if code != http.StatusForbidden || !strings.Contains(body, "private networks") || !strings.Contains(body, "shared address space") {
			t.Errorf("GET %s: %d %q, want 403 naming the shared address space", target, code, body)
		}
		if code := connectVia(t, p, target); code != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d, want 403", target, code)
		}
	}
	if n := h.Conns(); n != 0 {
		t.Errorf("the test host in the shared address space accepted %d connection(s)", n)
	}
	for _, e := range ev.all() {
		if e.Allowed {
			t.Errorf("an allowed attempt: %+v", e)
		}
	}

	// The same host under AllowPrivate: a library caller's explicit choice.
	if err := p.SetPolicy(Policy{AllowAll: true, AllowPrivate: true}); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, c, "http://"+h.Addr+"/"); code != http.StatusOK || body != h.Body {
		t.Errorf("GET %s with AllowPrivate: %d %q", h.Addr, code, body)
	}
}

// In allowlist mode the DNS rebinding guard refuses names resolving to
// the ranges the standard library does not call private (here CGNAT),
// while a literal the allowlist names is taken at its word; under
// RefuseOwnMachine (a pool's proxies) the literal is refused too.
func TestAllowlistPrivateNetworks(t *testing.T) {
	h := nethost.NewSharedSpace(t)
	host, port, _ := net.SplitHostPort(h.Addr)
	dns := startDNS(t, net.ParseIP(host))
	name := "cgnat.test:" + port
	for _, tc := range []struct {
		name       string
		pol        Policy
		target     string
		reached    bool
		wantReason string
	}{
		{"name, local", Policy{AllowHosts: []string{name}}, name, false, "DNS rebinding"},
		{"literal, local", Policy{AllowHosts: []string{h.Addr}}, h.Addr, true, ""},
		{"name, pool", Policy{AllowHosts: []string{name}, RefuseOwnMachine: true}, name, false, "shared address space"},
		{"literal, pool", Policy{AllowHosts: []string{h.Addr}, RefuseOwnMachine: true}, h.Addr, false, "shared address space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.SocketDir = t.TempDir()
			p := New(tc.pol, nil, nil)
			p.resolver = dns.resolver()
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			before := h.Conns()
			code, body, _ := get(t, client(p, http.DefaultTransport.(*http.Transport), true), "http://"+tc.target+"/")
			if tc.reached {
				if code != http.StatusOK || body != h.Body {
					t.Errorf("GET %s: %d %q, want the host's body", tc.target, code, body)
				}
				return
			}
			if code != http.StatusForbidden || !strings.Contains(body, tc.wantReason) {
				t.Errorf("GET %s: %d %q, want 403 naming %q", tc.target, code, body, tc.wantReason)
			}
			if n := h.Conns() - before; n != 0 {
				t.Errorf("the host accepted %d connection(s)", n)
			}
		})
	}
}

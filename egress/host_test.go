package egress

import (
	"strings"
	"testing"
)

// A Local proxy is reached by its unix socket only: a loopback TCP port
// would let any process of the machine use the trial's policy.
func TestLocalProxyListensOnItsSocketOnly(t *testing.T) {
	h, err := Local{SocketDir: t.TempDir()}.StartProxy(t.Context(), Policy{AllowHosts: []string{"example.com:443"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !strings.HasPrefix(h.Addr(), "unix:") {
		t.Errorf("Addr() = %q; want the unix socket", h.Addr())
	}
	if tcp := h.(localHandle).p.Addr(); tcp != "" {
		t.Errorf("the proxy listens on loopback TCP at %s", tcp)
	}
}

// A target longer than any host:port is refused as bad and never makes an
// event as large as the request header that carried it.
func TestProxyRefusesOversizedTargets(t *testing.T) {
	var evs []Event
	p := New(Policy{AllowHosts: []string{"example.com:443"}, SocketDir: t.TempDir()}, nil, func(ev Event) { evs = append(evs, ev) })
	long := strings.Repeat("a", 60000) + ":443"
	d := p.decideFor(t, long)
	if d.code != 400 || len(d.ev.Host) > maxTarget || !strings.Contains(d.ev.Reason, "bad target") {
		t.Errorf("a %d-character target: code %d, host %d characters, reason %q; want 400, at most %d, bad target", len(long), d.code, len(d.ev.Host), d.ev.Reason, maxTarget)
	}
	p.report(Event{Host: "h", Reason: strings.Repeat("r", 5000)})
	if len(evs) != 1 || len(evs[0].Reason) > maxReason+len("…") {
		t.Errorf("a 5000-byte reason was reported as %d bytes", len(evs[0].Reason))
	}
}

// decideFor decides one CONNECT to hostport under p's policy.
func (p *Proxy) decideFor(t *testing.T, hostport string) decision {
	t.Helper()
	a, err := newActive(p.policy)
	if err != nil {
		t.Fatal(err)
	}
	p.active.Store(a)
	return p.decide(t.Context(), "CONNECT", hostport)
}

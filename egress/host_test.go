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

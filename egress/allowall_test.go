package egress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv/nethost"
)

// connectVia opens a CONNECT tunnel to target through the proxy's socket
// and returns the proxy's status code.
func connectVia(t *testing.T, p *Proxy, target string) int {
	t.Helper()
	c, err := net.Dial("unix", strings.TrimPrefix(p.UnixAddr(), "unix:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// In allow-all mode nothing on the engine's own machine is reachable: not
// loopback by any spelling, not the unspecified address, not link-local,
// not a name that resolves to loopback (rebinding), and not a name at all
// when its only address is refused; each refusal is reported.
func TestAllowAllRefusesTheEnginesMachine(t *testing.T) {
	hit := false
	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	defer local.Close()
	_, port, _ := net.SplitHostPort(hostPort(t, local.URL))
	dns := startDNS(t, net.IPv4(127, 0, 0, 1))

	ev := &events{}
	p := New(Policy{AllowAll: true, SocketDir: t.TempDir()}, nil, ev.add)
	p.resolver = dns.resolver()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(p, http.DefaultTransport.(*http.Transport), true)

	for _, target := range []string{
		"127.0.0.1:" + port, "127.1.2.3:" + port, "localhost:" + port, "[::1]:" + port,
		"[::ffff:127.0.0.1]:" + port, "0.0.0.0:" + port, "[::]:" + port,
		"169.254.169.254:80", "[fe80::1]:80", "rebind.test:" + port,
	} {
		if code, body, _ := get(t, c, "http://"+target+"/"); code != http.StatusForbidden {
			t.Errorf("GET %s: %d %q, want 403", target, code, body)
		}
		if code := connectVia(t, p, target); code != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d, want 403", target, code)
		}
	}
	if hit {
		t.Errorf("the loopback listener was reached")
	}
	evs := ev.all()
	if len(evs) != 20 {
		t.Fatalf("%d events, want 20: %+v", len(evs), evs)
	}
	for _, e := range evs {
		if e.Allowed || !strings.Contains(e.Reason, "own machine") {
			t.Errorf("event %+v: want a refusal naming the engine's machine", e)
		}
	}
}

// In allow-all mode a host elsewhere (a test host in a network namespace of
// its own) is reached by plain HTTP and by CONNECT, and the connection is
// reported as allowed; the host-side address of the veth pair, an address
// of this machine, is not.
func TestAllowAllReachesOtherHosts(t *testing.T) {
	h := nethost.New(t)
	ev := &events{}
	p := New(Policy{AllowAll: true, SocketDir: t.TempDir()}, nil, ev.add)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(p, http.DefaultTransport.(*http.Transport), true)

	code, body, _ := get(t, c, "http://"+h.Addr+"/")
	if code != http.StatusOK || body != h.Body {
		t.Fatalf("GET the test host: %d %q", code, body)
	}
	if code := connectVia(t, p, h.Addr); code != http.StatusOK {
		t.Errorf("CONNECT the test host: %d", code)
	}
	evs := ev.all()
	if len(evs) != 2 || !evs[0].Allowed || !evs[1].Allowed || evs[0].Reason != "" {
		t.Errorf("events %+v, want two allowed connections", evs)
	}

	// The veth's host side is one below the test host's address.
	host, _, _ := net.SplitHostPort(h.Addr)
	ip := net.ParseIP(host).To4()
	own := net.IPv4(ip[0], ip[1], ip[2], ip[3]-1).String()
	ln, err := net.Listen("tcp", net.JoinHostPort(own, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("this machine's own address was reached") }))
	if code, body, _ := get(t, c, "http://"+ln.Addr().String()+"/"); code != http.StatusForbidden || !strings.Contains(body, "an address of this machine") {
		t.Errorf("GET this machine's own address %s: %d %q", ln.Addr(), code, body)
	}
}

// Proxies sharing a SocketDir each listen on a socket of their own, and
// Close removes the proxy's own directory only.
func TestSocketPerProxy(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer srv.Close()
	a := New(Policy{AllowHosts: []string{hostPort(t, srv.URL)}, SocketDir: dir}, nil, nil)
	b := New(Policy{AllowHosts: []string{"other.invalid:1"}, SocketDir: dir}, nil, nil)
	for _, p := range []*Proxy{a, b} {
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer p.Close()
	}
	if a.UnixAddr() == b.UnixAddr() {
		t.Fatalf("both proxies listen on %s", a.UnixAddr())
	}
	if code, _, _ := get(t, client(a, http.DefaultTransport.(*http.Transport), true), srv.URL); code != http.StatusOK {
		t.Errorf("through a's socket: %d, want 200", code)
	}
	if code, _, _ := get(t, client(b, http.DefaultTransport.(*http.Transport), true), srv.URL); code != http.StatusForbidden {
		t.Errorf("through b's socket: %d, want 403 (b's policy)", code)
	}
	aDir := filepath.Dir(strings.TrimPrefix(a.UnixAddr(), "unix:"))
	a.Close()
	if _, err := os.Stat(aDir); !os.IsNotExist(err) {
		t.Errorf("a's socket directory is still there after Close: %v", err)
	}
	if _, err := os.Stat(strings.TrimPrefix(b.UnixAddr(), "unix:")); err != nil {
		t.Errorf("closing a removed b's socket: %v", err)
	}
}

// A socket directory too deep for sun_path still gets a proxy listening on
// a unix socket, in a short directory removed at Close.
func TestSocketDirTooDeep(t *testing.T) {
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	p := New(Policy{AllowHosts: []string{"a.invalid:1"}, SocketDir: deep}, nil, nil)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start with a socket dir of %d bytes: %v", len(deep), err)
	}
	sock := strings.TrimPrefix(p.UnixAddr(), "unix:")
	if st, err := os.Stat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket: %v", sock, err)
	}
	p.Close()
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("the short socket directory is still there after Close: %v", err)
	}
}

// With RefuseOwnMachine (a sandbox pool's proxies), an allowlist that names
// this machine, by literal, by "localhost", by a name resolving to one of
// its addresses, or by a public-looking name resolving to the veth's host
// side, reaches none of it; a host elsewhere on the allowlist is reached.
func TestAllowlistRefuseOwnMachine(t *testing.T) {
	h := nethost.New(t)
	host, _, _ := net.SplitHostPort(h.Addr)
	ip := net.ParseIP(host).To4()
	own := net.IPv4(ip[0], ip[1], ip[2], ip[3]-1)
	ln, err := net.Listen("tcp", net.JoinHostPort(own.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hit := make(chan string, 8)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- r.Host }))
	_, ownPort, _ := net.SplitHostPort(ln.Addr().String())
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- r.Host }))
	defer loop.Close()
	_, loopPort, _ := net.SplitHostPort(hostPort(t, loop.URL))
	dns := startDNS(t, own)

	allow := []string{h.Addr, "127.0.0.1:" + loopPort, "localhost:" + loopPort, ln.Addr().String(), "mine.test:" + ownPort}
	ev := &events{}
	p := New(Policy{AllowHosts: allow, AllowPrivate: true, RefuseOwnMachine: true, SocketDir: t.TempDir()}, nil, ev.add)
	p.resolver = dns.resolver()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(p, http.DefaultTransport.(*http.Transport), true)
	for _, target := range allow[1:] {
		if code, body, _ := get(t, c, "http://"+target+"/"); code != http.StatusForbidden || !strings.Contains(body, "own machine") {
			t.Errorf("GET %s: %d %q, want 403 naming the proxy's own machine", target, code, body)
		}
		if code := connectVia(t, p, target); code != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d, want 403", target, code)
		}
	}
	select {
	case got := <-hit:
		t.Errorf("this machine was reached (%s)", got)
	default:
	}
	if code, body, _ := get(t, c, "http://"+h.Addr+"/"); code != http.StatusOK || body != h.Body {
		t.Errorf("GET the allowed test host: %d %q", code, body)
	}
	// SetPolicy keeps the guard only when the new policy asks for it.
	if err := p.SetPolicy(Policy{AllowHosts: []string{ln.Addr().String()}, RefuseOwnMachine: true}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(t, c, "http://"+ln.Addr().String()+"/"); code != http.StatusForbidden {
		t.Errorf("after SetPolicy, GET this machine's address: %d, want 403", code)
	}
}

package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// events collects what the proxy reports.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) add(ev Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }
func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.evs...)
}

func startProxy(t *testing.T, pol Policy) (*Proxy, *events) {
	t.Helper()
	ev := &events{}
	if pol.SocketDir == "" {
		pol.SocketDir = t.TempDir()
	}
	p := New(pol, nil, ev.add)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ev
}

// client returns an HTTP client using the proxy over TCP or its socket.
func client(p *Proxy, base *http.Transport, unix bool) *http.Client {
	tr := base.Clone()
	tr.DisableKeepAlives = true
	if unix {
		sock := strings.TrimPrefix(p.UnixAddr(), "unix:")
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid:1"})
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			if addr != "egress.invalid:1" {
				return nil, fmt.Errorf("dialled %s directly", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: p.Addr()})
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestAllowedAndRefused(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://refused.invalid/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "plain %s host=%s", r.URL.Path, r.Host)
	}))
	defer plain.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s", r.URL.Path)
	}))
	defer tls.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("refused server reached: %s", r.URL)
	}))
	defer other.Close()

	p, ev := startProxy(t, Policy{AllowHosts: []string{hostPort(t, plain.URL), hostPort(t, tls.URL)}})
	base := tls.Client().Transport.(*http.Transport)
	for _, unix := range []bool{false, true} {
		t.Run(fmt.Sprintf("unix=%v", unix), func(t *testing.T) {
			c := client(p, base, unix)
			if code, body, _ := get(t, c, plain.URL+"/x"); code != 200 || body != "plain /x host="+hostPort(t, plain.URL) {
				t.Errorf("plain HTTP: %d %q", code, body)
			}
			if code, body, _ := get(t, c, tls.URL+"/y"); code != 200 || body != "tls /y" {
				t.Errorf("CONNECT: %d %q", code, body)
			}
			// Redirects go back to the client, never followed by the proxy.
			if code, _, h := get(t, c, plain.URL+"/redirect"); code != http.StatusFound || h.Get("Location") != "http://refused.invalid/" {
				t.Errorf("redirect: %d %v", code, h)
			}
			// A host not in the list: 403 for plain HTTP…
			if code, _, h := get(t, c, other.URL+"/z"); code != http.StatusForbidden || h.Get("X-Proxy-Error") != "blocked-by-allowlist" {
				t.Errorf("refused plain: %d %v", code, h)
			}
			// …and for CONNECT (the client reports the proxy's status).
			_, err := c.Get(strings.Replace(other.URL, "http:", "https:", 1))
			if err == nil || !strings.Contains(err.Error(), "Forbidden") {
				t.Errorf("refused CONNECT: %v", err)
			}
		})
	}

	var allowed, refused int
	for _, e := range ev.all() {
		if e.Time.IsZero() || e.Host != "127.0.0.1" || e.Port == 0 || e.Method == "" {
			t.Errorf("incomplete event %+v", e)
		}
		if e.Allowed {
			allowed++
			continue
		}
		refused++
		if e.Reason != "not in allow_hosts" || fmt.Sprintf("%s:%d", e.Host, e.Port) != hostPort(t, other.URL) {
			t.Errorf("refused event %+v", e)
		}
	}
	if allowed != 6 || refused != 4 {
		t.Errorf("%d allowed and %d refused events, want 6 and 4: %+v", allowed, refused, ev.all())
	}
}

// TestRefusedNameNotResolved checks that names outside the list never reach
// DNS, and that an allowed name resolving to loopback is refused.
func TestRefusedNameNotResolved(t *testing.T) {
	dns := startDNS(t, net.IPv4(127, 0, 0, 1))
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("rebinding target reached")
	}))
	defer target.Close()
	_, port, _ := net.SplitHostPort(hostPort(t, target.URL))

	ev := &events{}
	p := New(Policy{AllowHosts: []string{"rebind.test:" + port}, SocketDir: t.TempDir()}, nil, ev.add)
	p.resolver = dns.resolver()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := client(p, http.DefaultTransport.(*http.Transport), false)

	if code, _, _ := get(t, c, "http://refused.test:"+port+"/"); code != http.StatusForbidden {
		t.Errorf("refused name: %d", code)
	}
	if n := dns.queries.Load(); n != 0 {
		t.Errorf("refused name caused %d DNS queries", n)
	}
	code, body, _ := get(t, c, "http://rebind.test:"+port+"/")
	if code != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
		t.Errorf("rebinding: %d %q", code, body)
	}
	if dns.queries.Load() == 0 {
		t.Errorf("allowed name was not resolved")
	}
	evs := ev.all()
	if len(evs) != 2 || evs[1].Allowed || !strings.Contains(evs[1].Reason, "127.0.0.1") {
		t.Errorf("events %+v", evs)
	}
}

func TestConcurrentConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	defer tls.Close()
	// Fewer slots than clients: the rest wait their turn.
	p, ev := startProxy(t, Policy{AllowHosts: []string{hostPort(t, srv.URL), hostPort(t, tls.URL)}, MaxConns: 8})
	base := tls.Client().Transport.(*http.Transport)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(p, base, i%2 == 0)
			u := fmt.Sprintf("%s/%d", srv.URL, i)
			if i%4 < 2 {
				u = fmt.Sprintf("%s/%d", tls.URL, i)
			}
			resp, err := c.Get(u)
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != fmt.Sprintf("/%d", i) {
				errs <- fmt.Errorf("request %d got %q", i, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(ev.all()); got != n {
		t.Errorf("%d events, want %d", got, n)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	// An upstream that echoes: an open tunnel to it must be cut by Close.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var echoWG sync.WaitGroup
	echoWG.Add(1)
	go func() {
		defer echoWG.Done()
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			echoWG.Add(1)
			go func() { defer echoWG.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	defer func() { echo.Close(); echoWG.Wait() }()

	before := runtime.NumGoroutine()
	p := New(Policy{AllowHosts: []string{echo.Addr().String()}, SocketDir: t.TempDir()}, nil, nil)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var tunnels []net.Conn
	for i := range 5 {
		network, addr := "tcp", p.Addr()
		if i%2 == 1 {
			network, addr = "unix", strings.TrimPrefix(p.UnixAddr(), "unix:")
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo.Addr(), echo.Addr())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("echo through tunnel: %q %v", line, err)
		}
		tunnels = append(tunnels, c)
	}
	// An idle keep-alive connection too.
	idle, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range tunnels {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("tunnel still open after Close: %v", err)
		}
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Errorf("TCP listener still accepting")
	}
	if _, err := net.Dial("unix", strings.TrimPrefix(p.UnixAddr(), "unix:")); err == nil {
		t.Errorf("unix socket still accepting")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Every goroutine the proxy started has ended. Close waits for its
	// own; the echo server's per-connection goroutines end once the
	// tunnels' upstream sides are closed, which may take a moment.
	var now int
	for range 200 {
		if now = runtime.NumGoroutine(); now <= before+len(tunnels) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if now > before+len(tunnels) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after Close\n%s", before, now, buf[:runtime.Stack(buf, true)])
	}
}

func TestContextEndsProxy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := New(Policy{SocketDir: t.TempDir()}, nil, nil)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Close after the context ended is still safe and returns once stopped.
	p.Close()
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Errorf("listener alive after context end")
	}
}

func TestPolicyMatching(t *testing.T) {
	rules, err := parseRules([]string{"API.Example.com:443", "*.example.org:443", "127.0.0.1:8000", "[::1]:9000"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		hostport string
		want     bool
	}{
		{"api.example.com:443", true},
		{"API.EXAMPLE.COM.:443", true},
		{"api.example.com:80", false},
		{"x.api.example.com:443", false},
		{"a.example.org:443", true},
		{"a.b.example.org:443", true},
		{"example.org:443", false},
		{"badexample.org:443", false},
		{"127.0.0.1:8000", true},
		{"127.0.0.2:8000", false},
		{"[::1]:9000", true},
		{"[0:0::1]:9000", true},
	} {
		h, port, err := splitHostPort(tc.hostport)
		if err != nil {
			t.Fatal(err)
		}
		if got := allowed(rules, h, port); got != tc.want {
			t.Errorf("%s: allowed=%v, want %v", tc.hostport, got, tc.want)
		}
	}
	for _, bad := range []string{"example.com", "example.com:0", "example.com:http", "a.*.com:443", "*.:443", ":443"} {
		if err := (Policy{AllowHosts: []string{bad}}).Validate(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	p := New(Policy{AllowHosts: []string{"nope"}}, nil, nil)
	if err := p.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("Start with a bad policy: %v", err)
	}
}

func TestNonProxyRequests(t *testing.T) {
	p, ev := startProxy(t, Policy{})
	resp, err := http.Get("http://" + p.Addr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %d", resp.StatusCode)
	}
	if len(ev.all()) != 0 {
		t.Errorf("events for a non-proxy request: %+v", ev.all())
	}
}

// dnsServer answers every A query with one address, on loopback UDP.
type dnsServer struct {
	conn    net.PacketConn
	queries atomic.Int64
}

func startDNS(t *testing.T, ip net.IP) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: pc}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.queries.Add(1)
			q := buf[:n]
			if n < 12 {
				continue
			}
			// The question ends after the name's labels, type and class.
			i := 12
			for i < n && q[i] != 0 {
				i += int(q[i]) + 1
			}
			if i+5 > n {
				continue
			}
			qtype := binary.BigEndian.Uint16(q[i+1:])
			question := q[12 : i+5]
			resp := make([]byte, 12, 64)
			copy(resp, q[:2])
			binary.BigEndian.PutUint16(resp[2:], 0x8180)
			binary.BigEndian.PutUint16(resp[4:], 1)
			resp = append(resp, question...)
			if qtype == 1 {
				binary.BigEndian.PutUint16(resp[6:], 1)
				resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
				resp = append(resp, ip.To4()...)
			}
			pc.WriteTo(resp, from)
		}
	}()
	return s
}

func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

// The standard library's own log lines (here ReverseProxy's about a body
// cut short mid-copy) go to the proxy's logger at Debug, never to package
// log, which writes to the terminal.
func TestStdlibLogLinesGoToSlogDebug(t *testing.T) {
	// An upstream that promises 100 bytes and hangs up after 10.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "0123456789")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer up.Close()

	var std strings.Builder
	var stdMu sync.Mutex
	log.SetOutput(writerFunc(func(b []byte) (int, error) { stdMu.Lock(); defer stdMu.Unlock(); return std.Write(b) }))
	defer log.SetOutput(os.Stderr)
	var logs syncLog
	p := New(Policy{AllowHosts: []string{hostPort(t, up.URL)}, SocketDir: t.TempDir()},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	resp, err := client(p, http.DefaultTransport.(*http.Transport), false).Get(up.URL)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("the cut body read whole through the proxy")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "ReverseProxy read error during body copy") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := logs.String(); !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "ReverseProxy read error during body copy") {
		t.Errorf("the proxy's logger did not get the stdlib's line at Debug:\n%s", got)
	}
	stdMu.Lock()
	defer stdMu.Unlock()
	if std.Len() > 0 {
		t.Errorf("package log (the terminal) got: %s", std.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// syncLog is a log sink the proxy's goroutines write while the test reads.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(b []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(b) }
func (s *syncLog) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

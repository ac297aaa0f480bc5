// Package egress is the logging egress proxy through which sandboxes with an
// allowlist network policy, or network: allow (Policy.AllowAll), reach the
// outside.
//
// The proxy speaks HTTP CONNECT (tunnels, for HTTPS and anything else over
// TCP) and plain HTTP proxying (absolute-URI requests). It listens on a
// loopback TCP address and on a unix socket; sandboxes in their own network
// namespace reach it through the socket bind-mounted in (sandbox.Policy's
// ProxyAddr is "unix:/path" or "host:port"). Only host:port pairs in the
// policy's allow_hosts get through; every attempt, allowed or not, is logged
// and reported as an Event.
//
// What it does not do: it cannot see inside CONNECT tunnels, so an allowed
// host:port can carry any protocol; it never follows redirects (the client
// sees them and must ask again, through the policy); names of refused hosts
// are never resolved. In allow-all mode every destination but the engine's
// own machine and private networks gets through (see Policy.AllowAll).
// Against DNS rebinding it refuses allowed names that resolve to an address
// that is not the public internet (NonPublic; unless Policy.AllowPrivate)
// and dials the very addresses it checked; it does not check certificates
// or SNI, which would need TLS interception.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Event is one attempt to go out through the proxy.
type Event struct {
	Time time.Time `json:"time"`
	Host string    `json:"host"`
	Port int       `json:"port"`
	// Method is CONNECT for tunnels, else the HTTP method.
	Method string `json:"method"`
	// Allowed is false when the policy refused the attempt (not in
	// allow_hosts, or an allowed name resolving to a private address).
	Allowed bool `json:"allowed"`
	// Reason says why it was refused, or why an allowed attempt still
	// failed (DNS, dial); empty for a connection that went through.
	Reason string `json:"reason,omitempty"`
}

// Proxy is a logging egress proxy. Create it with New, then Start it.
type Proxy struct {
	policy  Policy
	logger  *slog.Logger
	onEvent func(Event)

	// active is what decides each attempt: set by Start, swapped whole by
	// SetPolicy, so one attempt never mixes two policies.
	active    atomic.Pointer[activePolicy]
	srv       *http.Server
	transport *http.Transport
	fwd       *httputil.ReverseProxy
	resolver  *net.Resolver
	tcpLn     net.Listener
	unixLn    net.Listener
	// unixOnly: no loopback TCP listener. Local's proxies are reached by
	// their unix socket alone, which only the sandbox it is bound into
	// sees; a TCP port on loopback would let any process of the machine
	// (another trial's sandbox sharing its network) use this trial's
	// policy.
	unixOnly bool
	sockDir  string
	ownsDir  bool
	stopCtx  func() bool

	mu      sync.Mutex
	started bool
	closed  bool
	tunnels map[net.Conn]struct{}
	// inflight cancels the requests being handled, so SetPolicy can cut
	// what the old policy let through (a forwarded request still
	// streaming, a tunnel being dialled).
	inflight map[*inflightReq]struct{}
	// handlers counts running handlers so Close can wait for them; Add is
	// only called under mu while not closed.
	handlers sync.WaitGroup
	serving  sync.WaitGroup
	done     chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// New makes a proxy enforcing policy. onEvent (may be nil) is called for
// every attempt, from the connection's goroutine: it must not block long.
func New(policy Policy, logger *slog.Logger, onEvent func(Event)) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	if policy.MaxConns <= 0 {
		policy.MaxConns = defaultMaxConns
	}
	if policy.DialTimeout <= 0 {
		policy.DialTimeout = defaultDialTimeout
	}
	if policy.IdleTimeout <= 0 {
		policy.IdleTimeout = defaultIdleTimeout
	}
	return &Proxy{policy: policy, logger: logger, onEvent: onEvent, tunnels: map[net.Conn]struct{}{}, inflight: map[*inflightReq]struct{}{}, done: make(chan struct{}), resolver: net.DefaultResolver}
}

// activePolicy is the part of a Policy that decides attempts; SetPolicy
// replaces it.
type activePolicy struct {
	rules        []rule
	hosts        []string
	allowAll     bool
	allowPrivate bool
	refuseOwn    bool
}

// denyAll refuses every attempt.
var denyAll = &activePolicy{}

func newActive(pol Policy) (*activePolicy, error) {
	rules, err := parseRules(pol.AllowHosts)
	if err != nil {
		return nil, err
	}
	return &activePolicy{rules: rules, hosts: pol.AllowHosts, allowAll: pol.AllowAll, allowPrivate: pol.AllowPrivate, refuseOwn: pol.RefuseOwnMachine}, nil
}

type inflightReq struct{ cancel context.CancelFunc }

// SetPolicy replaces what the proxy lets through (AllowHosts, AllowAll,
// AllowPrivate; the listeners' settings stay those of New) for every
// attempt from now on, and cuts every tunnel and request the old policy
// let through, so nothing opened under it outlives it. A policy with no
// hosts and not AllowAll refuses everything (a network: deny phase of a
// sandbox that has a proxy). A bad policy is refused, fail closed: the
// proxy then refuses everything until a good one is set.
func (p *Proxy) SetPolicy(pol Policy) error {
	next, err := newActive(pol)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("setting the egress proxy's policy: the proxy is closed")
	}
	if err != nil {
		next = denyAll
		err = fmt.Errorf("setting the egress proxy's policy (it now refuses everything): %w", err)
	}
	p.policy.AllowHosts, p.policy.AllowAll, p.policy.AllowPrivate, p.policy.RefuseOwnMachine = next.hosts, next.allowAll, next.allowPrivate, next.refuseOwn
	if !p.started {
		return err
	}
	p.active.Store(next)
	for c := range p.tunnels {
		c.Close()
		delete(p.tunnels, c)
	}
	for r := range p.inflight {
		r.cancel()
	}
	p.logger.Info("egress proxy policy set", "allow_hosts", next.hosts, "allow_all", next.allowAll)
	return err
}

// Start listens on 127.0.0.1:0 and on a unix socket and serves until Close
// or until ctx ends.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	active, err := newActive(p.policy)
	if err != nil {
		return fmt.Errorf("starting egress proxy: %w", err)
	}
	if p.started || p.closed {
		return errors.New("starting egress proxy: already started")
	}
	p.active.Store(active)

	// A directory of this proxy's own: concurrent trials' proxies must
	// never share a socket path, or one trial's traffic (and its refusal
	// events) would go through another's policy.
	parent := p.policy.SocketDir
	if parent == "" {
		parent = os.TempDir()
	} else if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("starting egress proxy: socket directory: %w", err)
	}
	if len(filepath.Join(parent, "egXXXXXXXXXX", "egress.sock")) >= maxSocketPath {
		// A deep state dir would not fit sun_path: a short directory of
		// this proxy's own instead, removed at Close all the same.
		parent = os.TempDir()
	}
	if p.sockDir, err = os.MkdirTemp(parent, "eg"); err != nil {
		return fmt.Errorf("starting egress proxy: socket directory: %w", err)
	}
	// Sandboxes may run as another user than the engine (an image's User on
	// the docker rung, mapped ids in a user namespace); who can reach the
	// socket is decided by the bind mount that carries it in.
	if err := os.Chmod(p.sockDir, 0o711); err != nil {
		os.RemoveAll(p.sockDir)
		return fmt.Errorf("starting egress proxy: socket directory: %w", err)
	}
	p.ownsDir = true
	sock := filepath.Join(p.sockDir, "egress.sock")
	var lc net.ListenConfig
	var tcpLn net.Listener
	closeTCP := func() {
		if tcpLn != nil {
			tcpLn.Close()
		}
	}
	if !p.unixOnly {
		if tcpLn, err = lc.Listen(ctx, "tcp", "127.0.0.1:0"); err != nil {
			p.cleanupDir()
			return fmt.Errorf("starting egress proxy: %w", err)
		}
	}
	unixLn, err := lc.Listen(ctx, "unix", sock)
	if err != nil {
		closeTCP()
		p.cleanupDir()
		return fmt.Errorf("starting egress proxy: unix socket %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		closeTCP()
		unixLn.Close()
		p.cleanupDir()
		return fmt.Errorf("starting egress proxy: %w", err)
	}
	sem := make(chan struct{}, p.policy.MaxConns)
	listeners := []net.Listener{}
	if tcpLn != nil {
		p.tcpLn = &limitListener{Listener: tcpLn, sem: sem, done: p.done}
		listeners = append(listeners, p.tcpLn)
	}
	p.unixLn = &limitListener{Listener: unixLn, sem: sem, done: p.done}
	listeners = append(listeners, p.unixLn)

	p.transport = &http.Transport{
		Proxy:                  nil, // never chain to the engine's own proxy
		DialContext:            p.dialPinned,
		DisableKeepAlives:      true,
		ResponseHeaderTimeout:  2 * time.Minute,
		MaxResponseHeaderBytes: 1 << 20,
	}
	p.fwd = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The Host header is the URL's host, the one the policy
			// checked, never a different name sent to an allowed address.
			pr.Out.Host = ""
		},
		Transport:     p.transport,
		FlushInterval: -1,
		// The stdlib's own lines (a body cut short mid-copy, …) go to
		// slog at Debug, not to the process's stderr through package log.
		ErrorLog: slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			lvl := slog.LevelWarn
			if errors.Is(err, context.Canceled) {
				lvl = slog.LevelDebug // the client went away: nothing to report
			}
			p.logger.Log(r.Context(), lvl, "egress upstream error", "host", r.URL.Host, "method", r.Method, "err", err)
			http.Error(w, "egress proxy: upstream error: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       p.policy.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.logger.Handler(), slog.LevelDebug),
	}
	for _, ln := range listeners {
		p.serving.Add(1)
		go func() {
			defer p.serving.Done()
			p.srv.Serve(ln)
		}()
	}
	p.started = true
	p.stopCtx = context.AfterFunc(ctx, func() { p.Close() })
	p.logger.Info("egress proxy listening", "addr", p.Addr(), "unix", p.UnixAddr(), "allow_hosts", p.policy.AllowHosts, "allow_all", p.policy.AllowAll)
	return nil
}

// Addr is the loopback TCP address, host:port.
func (p *Proxy) Addr() string {
	if p.tcpLn == nil {
		return ""
	}
	return p.tcpLn.Addr().String()
}

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107

// UnixAddr is the unix socket, as "unix:/path".
func (p *Proxy) UnixAddr() string {
	if p.unixLn == nil {
		return ""
	}
	return "unix:" + p.unixLn.Addr().String()
}

// Close stops listening, cuts every connection and tunnel, and waits for
// all of the proxy's goroutines to end. It is idempotent; concurrent calls
// all return once the proxy has stopped.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.close() })
	return p.closeErr
}

func (p *Proxy) close() error {
	p.mu.Lock()
	p.closed = true
	close(p.done)
	started := p.started
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	if !started {
		return nil
	}
	p.stopCtx()
	err := p.srv.Close()
	p.serving.Wait()
	p.handlers.Wait()
	p.transport.CloseIdleConnections()
	os.Remove(strings.TrimPrefix(p.UnixAddr(), "unix:"))
	p.cleanupDir()
	if err != nil {
		return fmt.Errorf("closing egress proxy: %w", err)
	}
	return nil
}

func (p *Proxy) cleanupDir() {
	if p.ownsDir {
		os.RemoveAll(p.sockDir)
	}
}

// ServeHTTP handles one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		http.Error(w, "egress proxy: closing", http.StatusServiceUnavailable)
		return
	}
	p.handlers.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	req := &inflightReq{cancel: cancel}
	p.inflight[req] = struct{}{}
	p.mu.Unlock()
	defer p.handlers.Done()
	defer func() {
		p.mu.Lock()
		delete(p.inflight, req)
		p.mu.Unlock()
		cancel()
	}()
	r = r.WithContext(ctx)

	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != "":
		p.forward(w, r)
	case r.URL.IsAbs():
		http.Error(w, "egress proxy: only http:// URLs are proxied directly; use CONNECT for "+r.URL.Scheme, http.StatusBadRequest)
	default:
		http.Error(w, "egress proxy: this is a proxy; send absolute-URI requests (HTTP_PROXY) or CONNECT (HTTPS_PROXY)", http.StatusBadRequest)
	}
}

// decision is the outcome of checking one attempt.
type decision struct {
	// pol is the policy that decided; a tunnel opens only while it is
	// still the proxy's.
	pol   *activePolicy
	ev    Event
	addrs []string // pinned upstream addresses, when allowed
	code  int      // HTTP status for a refusal or failure
}

// decide checks hostport against the policy and resolves it.
func (p *Proxy) decide(ctx context.Context, method, hostport string) decision {
	pol := p.active.Load()
	d := decision{pol: pol, ev: Event{Time: time.Now(), Method: method, Host: hostport}}
	if len(hostport) > maxTarget {
		// No host name is longer (253 characters, a port and IPv6
		// brackets); a longer one would only make every event and log line
		// of this attempt as large as a request header may be.
		d.ev.Host = hostport[:maxTarget]
		d.ev.Reason = fmt.Sprintf("bad target: %d characters, longer than any host:port", len(hostport))
		d.code = http.StatusBadRequest
		return d
	}
	host, port, err := splitHostPort(hostport)
	if err != nil {
		d.ev.Reason = "bad target " + strconv.Quote(hostport) + ": " + err.Error()
		d.code = http.StatusBadRequest
		return d
	}
	d.ev.Host, d.ev.Port = host, port
	if pol.allowAll {
		return p.decideAllowAll(ctx, d)
	}
	if len(pol.rules) == 0 {
		d.ev.Reason = "no host is allowed now (network: deny)"
		d.code = http.StatusForbidden
		return d
	}
	if !allowed(pol.rules, host, port) {
		d.ev.Reason = "not in allow_hosts"
		d.code = http.StatusForbidden
		return d
	}
	d.ev.Allowed = true
	if pol.refuseOwn {
		return p.refuseOwnMachine(ctx, pol, d)
	}
	ps := strconv.Itoa(port)
	if ip := net.ParseIP(host); ip != nil {
		d.addrs = []string{net.JoinHostPort(ip.String(), ps)}
		return d
	}
	if host == "localhost" {
		d.addrs = []string{net.JoinHostPort("127.0.0.1", ps), net.JoinHostPort("::1", ps)}
		return d
	}
	lctx, cancel := context.WithTimeout(ctx, p.policy.DialTimeout)
	defer cancel()
	ips, err := p.resolver.LookupIPAddr(lctx, host)
	if err != nil {
		d.ev.Reason = "dns: " + err.Error()
		d.code = http.StatusBadGateway
		return d
	}
	var private []string
	for _, ip := range ips {
		if !pol.allowPrivate && !isPublic(ip.IP) {
			private = append(private, ip.IP.String())
			continue
		}
		d.addrs = append(d.addrs, net.JoinHostPort(ip.IP.String(), ps))
	}
	if len(d.addrs) == 0 {
		d.ev.Allowed = false
		d.ev.Reason = "resolves only to non-public addresses " + strings.Join(private, ", ") + " (DNS rebinding guard; allow the address itself or set allow_private)"
		d.code = http.StatusForbidden
	}
	return d
}

// refuseOwnMachine decides an allowlisted attempt under RefuseOwnMachine:
// only addresses off this machine are dialled, as with allow-all, and
// names keep the DNS rebinding guard of allowlist mode.
func (p *Proxy) refuseOwnMachine(ctx context.Context, pol *activePolicy, d decision) decision {
	return p.offMachine(ctx, d, !pol.allowPrivate, "the proxy's own machine and private networks are not reachable from a sandbox pool's sandboxes: ")
}

// decideAllowAll lets any destination through but the engine's own
// machine and private networks.
func (p *Proxy) decideAllowAll(ctx context.Context, d decision) decision {
	return p.offMachine(ctx, d, false, "the engine's own machine and private networks are not reachable with network: allow: ")
}

// offMachine lets d through to the addresses of its host that are not on
// this machine: a literal, "localhost" (always loopback), or a name
// resolved here, so that only the addresses that passed are dialled and a
// name cannot be re-pointed at loopback between the check and the
// connection. Addresses on a private network (privateNetwork) are refused
// too unless the policy allows private addresses, and guardNames also
// refuses a name's non-public addresses. refusal prefixes the reason when
// nothing is left.
func (p *Proxy) offMachine(ctx context.Context, d decision, guardNames bool, refusal string) decision {
	d.ev.Allowed = false
	ps := strconv.Itoa(d.ev.Port)
	ip := net.ParseIP(d.ev.Host)
	var ips []net.IP
	switch {
	case ip != nil:
		ips = []net.IP{ip}
	case strings.EqualFold(d.ev.Host, "localhost"):
		ips = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	default:
		lctx, cancel := context.WithTimeout(ctx, p.policy.DialTimeout)
		defer cancel()
		found, err := p.resolver.LookupIPAddr(lctx, d.ev.Host)
		if err != nil {
			d.ev.Reason = "dns: " + err.Error()
			d.code = http.StatusBadGateway
			return d
		}
		for _, a := range found {
			ips = append(ips, a.IP)
		}
	}
	local, err := localAddrs()
	if err != nil {
		// Fail closed: without the machine's addresses, any of them
		// could be the destination.
		d.ev.Reason = "cannot tell this machine's addresses apart: " + err.Error()
		d.code = http.StatusBadGateway
		return d
	}
	var refused []string
	for _, a := range ips {
		if why := ownMachine(a, local); why != "" {
			refused = append(refused, a.String()+" ("+why+")")
			continue
		}
		// Another machine's address on a private network (the pool's or
		// worker's VPC, a cluster's services, CGNAT metadata endpoints) is
		// no sandbox's to reach by literal or by name.
		if why := privateNetwork(addrOf(a)); why != "" && !d.pol.allowPrivate {
			refused = append(refused, a.String()+" ("+why+")")
			continue
		}
		if ip == nil && guardNames && !isPublic(a) {
			refused = append(refused, a.String()+" (non-public: DNS rebinding guard)")
			continue
		}
		d.addrs = append(d.addrs, net.JoinHostPort(a.String(), ps))
	}
	if len(d.addrs) == 0 {
		d.ev.Reason = refusal + strings.Join(refused, ", ")
		d.code = http.StatusForbidden
		return d
	}
	d.ev.Allowed = true
	return d
}

// ownMachine says why ip is on the engine's own machine (loopback,
// unspecified, link-local, multicast, or one of its interfaces' addresses),
// or "" when it is not. IPv4-mapped IPv6 addresses count as their IPv4
// address.
func ownMachine(ip net.IP, local []net.IP) string {
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
		if ip4[0] == 0 {
			return "unspecified"
		}
		if ip4.Equal(net.IPv4bcast) {
			return "broadcast"
		}
	}
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	for _, l := range local {
		if l.Equal(ip) {
			return "an address of this machine"
		}
	}
	return ""
}

// localAddrs are the addresses of this machine's interfaces, read at each
// decision since interfaces come and go (a service listening on 0.0.0.0 is
// reached through any of them).
func localAddrs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this machine's interface addresses: %w", err)
	}
	out := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out, nil
}

// isPublic reports whether ip is an address of the public internet (see
// NonPublic).
func isPublic(ip net.IP) bool {
	return NonPublic(addrOf(ip)) == ""
}

// maxTarget bounds a host:port an attempt may name: 253 for the name, 8
// for brackets, colon and port.
const maxTarget = 261

// maxReason bounds an event's reason (an upstream error quotes the target).
const maxReason = 1024

// report logs and reports one attempt.
func (p *Proxy) report(ev Event) {
	if len(ev.Reason) > maxReason {
		ev.Reason = ev.Reason[:maxReason] + "…"
	}
	attrs := []any{"host", ev.Host, "port", ev.Port, "method", ev.Method}
	switch {
	case !ev.Allowed:
		p.logger.Warn("egress refused", append(attrs, "reason", ev.Reason)...)
	case ev.Reason != "":
		p.logger.Info("egress failed", append(attrs, "reason", ev.Reason)...)
	default:
		p.logger.Info("egress allowed", attrs...)
	}
	p.onEvent(ev)
}

func (p *Proxy) refuse(w http.ResponseWriter, d decision) {
	if d.code == http.StatusForbidden {
		w.Header().Set("X-Proxy-Error", "blocked-by-allowlist")
	}
	http.Error(w, fmt.Sprintf("egress proxy: %s:%d: %s", d.ev.Host, d.ev.Port, d.ev.Reason), d.code)
}

// dial connects to the first reachable pinned address.
func (p *Proxy) dial(ctx context.Context, addrs []string) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.policy.DialTimeout)
	defer cancel()
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(dctx, "tcp", a)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

type pinnedKey struct{}

// dialPinned is the forwarding transport's dialer: it connects only to the
// addresses decide checked for this request.
func (p *Proxy) dialPinned(ctx context.Context, _, _ string) (net.Conn, error) {
	addrs, _ := ctx.Value(pinnedKey{}).([]string)
	if len(addrs) == 0 {
		return nil, errors.New("egress proxy: no checked address for this request")
	}
	return p.dial(ctx, addrs)
}

// connect opens a tunnel.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	d := p.decide(r.Context(), http.MethodConnect, r.Host)
	if d.code != 0 {
		p.report(d.ev)
		p.refuse(w, d)
		return
	}
	up, err := p.dial(r.Context(), d.addrs)
	if err != nil {
		d.ev.Reason = "dial: " + err.Error()
		p.report(d.ev)
		http.Error(w, "egress proxy: cannot reach "+r.Host, http.StatusBadGateway)
		return
	}
	p.report(d.ev)
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress proxy: CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(d.pol, client, up) {
		client.Close()
		up.Close()
		return
	}
	defer p.untrack(client, up)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right after its CONNECT request.
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	p.pipe(client, up)
}

// pipe copies both ways until both directions end, an error, or the idle
// timeout.
func (p *Proxy) pipe(a, b net.Conn) {
	idle := p.policy.IdleTimeout
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(idleWriter{dst, idle}, idleReader{src, idle})
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// track registers a tunnel's connections, unless the proxy closed or its
// policy changed since pol decided the tunnel.
func (p *Proxy) track(pol *activePolicy, cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.active.Load() != pol {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.tunnels, c)
	}
}

// forward proxies one plain-HTTP request.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	hostport := r.URL.Host
	if r.URL.Port() == "" {
		hostport = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	d := p.decide(r.Context(), r.Method, hostport)
	if d.code != 0 {
		p.report(d.ev)
		p.refuse(w, d)
		return
	}
	p.report(d.ev)
	if r.Header.Get("Upgrade") != "" {
		http.Error(w, "egress proxy: protocol upgrades go through CONNECT", http.StatusBadRequest)
		return
	}
	p.fwd.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), pinnedKey{}, d.addrs)))
}

// idleReader and idleWriter push the connection's deadline forward on
// every read or write, so a tunnel dies only when idle.
type idleReader struct {
	c    net.Conn
	idle time.Duration
}

func (r idleReader) Read(b []byte) (int, error) {
	r.c.SetReadDeadline(time.Now().Add(r.idle))
	return r.c.Read(b)
}

type idleWriter struct {
	c    net.Conn
	idle time.Duration
}

func (w idleWriter) Write(b []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.idle))
	return w.c.Write(b)
}

// limitListener bounds concurrent connections across listeners sharing sem.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite half-closes when the underlying connection can.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

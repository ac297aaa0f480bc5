package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"evals.si/egress"
	"evals.si/image"
)

// A client names the images its sandboxes run, and the pool pulls them
// from the registry a reference names: without a check, a reference such
// as 127.0.0.1:2379/x, 10.0.0.5:6443/x or metadata.internal/x would make
// the pool speak HTTP to its own loopback services, its private network
// or a metadata endpoint, and hand the client what they answered. So the
// pool pulls only from registries on the public internet, and from those
// its operator lists (Options.AllowRegistries, sandboxd --allow-registry).
// Two places enforce it: checkRegistry, before a reference is resolved, for
// a refusal the client can act on; and RegistryTransport, the transport of
// sandboxd's image store, on every connection the store opens (redirects,
// token endpoints, a name whose DNS answer changed since the check), which
// also keeps registries' error bodies out of what clients are told.

// registryGuard decides which registries may be reached.
type registryGuard struct {
	allow    []registryEntry
	resolver *net.Resolver
	logger   *slog.Logger
	// envProxy is the HTTP(S)_PROXY the store's requests go through (nil:
	// none); proxies are the proxies it named, which the operator chose and
	// which are dialled whatever their address.
	envProxy func(*http.Request) (*url.URL, error)
	proxies  sync.Map
}

// registryEntry is one AllowRegistries entry; port "" is any port.
type registryEntry struct{ host, port string }

func newRegistryGuard(allow []string, logger *slog.Logger) (*registryGuard, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &registryGuard{resolver: net.DefaultResolver, logger: logger}
	for _, a := range allow {
		host, port := a, ""
		if h, p, err := net.SplitHostPort(a); err == nil {
			host, port = h, p
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("allowed registry %q: bad port %q (write HOST or HOST:PORT, e.g. registry.internal:5000)", a, p)
			}
		}
		host = normHost(host)
		if host == "" || strings.ContainsAny(host, "/@ ") {
			return nil, fmt.Errorf("allowed registry %q: not a host (write HOST or HOST:PORT, e.g. registry.internal:5000 or 10.0.0.9)", a)
		}
		g.allow = append(g.allow, registryEntry{host, port})
	}
	return g, nil
}

// normHost is host lower case, without a trailing dot or brackets, an IP
// address in its one canonical spelling.
func normHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	return host
}

// allowed says whether the operator listed host on one of ports.
func (g *registryGuard) allowed(host string, ports ...string) bool {
	host = normHost(host)
	return slices.ContainsFunc(g.allow, func(e registryEntry) bool {
		return e.host == host && (e.port == "" || slices.Contains(ports, e.port))
	})
}

// addrs resolves host (once) and returns its addresses, or refuses the
// registry (host[:port], as the refusal names it) when any is not on the
// public internet or is one of this machine's own.
func (g *registryGuard) addrs(ctx context.Context, registry, host string) ([]netip.Addr, error) {
	host = normHost(host)
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		found, err := g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolving registry host %s: %w", host, err)
		}
		addrs = found
	}
	local, err := net.InterfaceAddrs()
	if err != nil {
		// Fail closed: any of the machine's addresses could be host's.
		return nil, fmt.Errorf("checking registry host %s: listing the pool's own addresses: %w", host, err)
	}
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		why := egress.NonPublic(a)
		if why == "" && slices.ContainsFunc(local, func(l net.Addr) bool {
			n, ok := l.(*net.IPNet)
			return ok && n.IP.Equal(net.IP(a.AsSlice()))
		}) {
			why = "an address of the pool's machine"
		}
		if why != "" {
			refused = append(refused, a.String()+" ("+why+")")
		}
	}
	if len(refused) > 0 {
		return nil, &registryRefused{registry: normHostPort(registry), addrs: refused}
	}
	return addrs, nil
}

// registryRefused is a registry on the pool's machine or a private network.
type registryRefused struct {
	registry string
	addrs    []string
}

func (e *registryRefused) Error() string {
	return fmt.Sprintf("registry %s is at %s: this sandbox pool pulls images only from registries on the public internet or listed by its operator (evalsid sandboxd --allow-registry %s); push the image to such a registry", e.registry, strings.Join(e.addrs, ", "), e.registry)
}

// normHostPort is host[:port] with its host normalised.
func normHostPort(hp string) string {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return net.JoinHostPort(normHost(h), p)
	}
	return normHost(hp)
}

// checkRegistry refuses a registry reference whose registry is on the
// pool's machine or a private network, unless the operator listed it.
// Local references keep the AllowLocalImages rule. A pool whose images
// the cluster pulls (ClusterImages) is held to the same rule: its kubelets
// would pull from the registry a client named, on the cluster's network.
func (s *Server) checkRegistry(ctx context.Context, ref string) error {
	if !s.o.ClusterImages && s.o.Images == nil {
		return nil
	}
	reg, err := image.RegistryOf(ref)
	if err != nil || reg == "" {
		// A reference that does not parse is the store's to refuse, with
		// its own message; a local one is not a registry's.
		return nil
	}
	g, err := newRegistryGuard(s.o.AllowRegistries, s.o.Logger)
	if err != nil {
		return fmt.Errorf("the pool's AllowRegistries: %w", err)
	}
	host, port := reg, ""
	if h, p, err := net.SplitHostPort(reg); err == nil {
		host, port = h, p
	}
	// Without a port the store tries HTTPS (443), and for loopback plain
	// HTTP (80).
	ports := []string{port}
	if port == "" {
		ports = []string{"443", "80"}
	}
	if g.allowed(host, ports...) {
		return nil
	}
	if _, err := g.addrs(ctx, reg, host); err != nil {
		var refused *registryRefused
		if errors.As(err, &refused) {
			s.o.Logger.Warn("image registry refused", "ref", ref, "registry", reg, "addrs", refused.addrs)
		}
		return fmt.Errorf("image %q: %w", ref, err)
	}
	return nil
}

// RegistryTransport is the HTTP transport for a pool's image store
// (image.WithTransport): go-containerregistry's default transport, whose
// every connection goes only to a registry listed in allow (host or
// host:port) or to addresses on the public internet that are not this
// machine's, checked on the addresses a name resolves to, which are the
// ones dialled. Through an HTTP(S)_PROXY of the environment the proxy is
// dialled (the operator's) and the target is checked by the address it
// resolves to here. Error responses (status 400 and up) reach the store
// without their body, which could carry what a service that is not a
// registry answered; their status and registry error codes stay, and the
// body goes to logger.
func RegistryTransport(allow []string, logger *slog.Logger) (http.RoundTripper, error) {
	g, err := newRegistryGuard(allow, logger)
	if err != nil {
		return nil, err
	}
	g.envProxy = http.ProxyFromEnvironment
	return g.transport(), nil
}

func (g *registryGuard) transport() http.RoundTripper {
	// go-containerregistry's defaults (timeouts, idle connections), which
	// the store would use without a transport of its own.
	t := &http.Transport{}
	if base, ok := remote.DefaultTransport.(*http.Transport); ok {
		t = base.Clone()
	}
	t.Proxy = g.proxy
	t.DialContext = g.dial
	return redactErrors{next: t, logger: g.logger}
}

// proxy is the transport's Proxy: the environment's, with the target
// checked here, since the proxy, not this transport, dials it.
func (g *registryGuard) proxy(req *http.Request) (*url.URL, error) {
	if g.envProxy == nil {
		return nil, nil
	}
	u, err := g.envProxy(req)
	if err != nil || u == nil {
		return u, err
	}
	if !g.allowed(req.URL.Hostname(), portOf(req.URL)) {
		if _, err := g.addrs(req.Context(), req.URL.Host, req.URL.Hostname()); err != nil {
			return nil, err
		}
	}
	g.proxies.Store(net.JoinHostPort(u.Hostname(), portOf(u)), true)
	return u, nil
}

// portOf is u's port, or its scheme's default (as net/http dials it).
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "socks5", "socks5h":
		return "1080"
	}
	return "443"
}

// dial connects to addr if it is a listed registry or a proxy of the
// environment's, and otherwise only to the checked addresses its host
// resolves to.
func (g *registryGuard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dialling registry %s: %w", addr, err)
	}
	if _, ok := g.proxies.Load(addr); ok || g.allowed(host, port) {
		return d.DialContext(ctx, network, addr)
	}
	addrs, err := g.addrs(ctx, addr, host)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dialling registry %s: bad port %q", addr, port)
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(p)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// redactErrors replaces the body of error responses with one that keeps
// only the registry error codes (MANIFEST_UNKNOWN, UNAUTHORIZED, ...) the
// distribution spec defines, logging what the body said.
type redactErrors struct {
	next   http.RoundTripper
	logger *slog.Logger
}

// maxLoggedBody bounds what of an error body reaches the log.
const maxLoggedBody = 4 << 10

func (t redactErrors) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	// The query may hold a signed URL's credentials.
	where := req.URL.Scheme + "://" + req.URL.Host + req.URL.Path
	t.logger.Warn("image registry error response", "method", req.Method, "url", where, "status", resp.Status, "body", string(b[:min(len(b), maxLoggedBody)]))
	body := redactedBody(b)
	resp.Body = io.NopCloser(strings.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	resp.Header.Set("Content-Type", "application/json")
	return resp, nil
}

// registryCodes are the error codes of the distribution spec (and
// docker/distribution's UNAVAILABLE).
var registryCodes = []string{
	"BLOB_UNKNOWN", "BLOB_UPLOAD_INVALID", "BLOB_UPLOAD_UNKNOWN", "DIGEST_INVALID",
	"MANIFEST_BLOB_UNKNOWN", "MANIFEST_INVALID", "MANIFEST_UNKNOWN", "MANIFEST_UNVERIFIED",
	"NAME_INVALID", "NAME_UNKNOWN", "SIZE_INVALID", "TAG_INVALID", "UNAUTHORIZED", "DENIED",
	"UNSUPPORTED", "TOOMANYREQUESTS", "UNKNOWN", "UNAVAILABLE",
}

// redactedBody is an error body of the spec's form holding only b's known
// codes, each with a generic message; empty when b has none (the client
// then sees the status alone).
func redactedBody(b []byte) string {
	var in struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	type diag struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	var out struct {
		Errors []diag `json:"errors"`
	}
	if json.Unmarshal(b, &in) != nil {
		return ""
	}
	for _, e := range in.Errors {
		if slices.Contains(registryCodes, e.Code) {
			out.Errors = append(out.Errors, diag{Code: e.Code, Message: "the registry's message is in the sandbox pool's log"})
		}
	}
	if len(out.Errors) == 0 {
		return ""
	}
	j, _ := json.Marshal(out)
	return string(j)
}

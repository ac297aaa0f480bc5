package pool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"evals.si/image"
)

// AllowRegistries entries are host or host:port, matched without regard to
// case, a trailing dot, brackets or an IP address's spelling; anything else
// is refused when the guard is made.
func TestRegistryEntries(t *testing.T) {
	for _, bad := range []string{"", "a:0", "a:70000", "a:x", "http://a", "a/b", "a@b"} {
		if _, err := newRegistryGuard([]string{bad}, nil); err == nil {
			t.Errorf("entry %q accepted", bad)
		}
	}
	g, err := newRegistryGuard([]string{"Registry.Internal.", "127.0.0.1:5000", "[::1]:5001", "10.0.0.9"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, port string
		want       bool
	}{
		{"registry.internal", "443", true},
		{"REGISTRY.internal.", "5000", true},
		{"127.0.0.1", "5000", true},
		{"127.0.0.1", "5001", false},
		{"::1", "5001", true},
		{"0:0:0:0:0:0:0:1", "5001", true},
		{"::ffff:127.0.0.1", "5000", true},
		{"10.0.0.9", "6443", true},
		{"10.0.0.8", "443", false},
		{"other.internal", "443", false},
	} {
		if got := g.allowed(tc.host, tc.port); got != tc.want {
			t.Errorf("allowed(%s, %s) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
}

// Before a reference is resolved, its registry (as package image parses
// it: ubuntu is index.docker.io) is refused when it is on the pool's
// machine or a private network, by literal or by name, unless the operator
// listed it; local references and a cluster's images are not registries
// the pool reaches.
func TestCheckRegistry(t *testing.T) {
	store, err := image.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		o       Options
		ref     string
		refused []string // parts of the refusal; nil: let through
	}{
		{"loopback literal", Options{}, "127.0.0.1:2379/x:1", []string{"loopback", "--allow-registry 127.0.0.1:2379"}},
		{"loopback name", Options{}, "localhost:5000/x", []string{"loopback", "--allow-registry localhost:5000"}},
		{"private network", Options{}, "10.0.0.5:6443/x", []string{"RFC 1918"}},
		{"CGNAT metadata", Options{}, "100.100.100.200/latest/meta-data", []string{"shared address space"}},
		{"link-local metadata", Options{}, "169.254.169.254/latest", []string{"link-local"}},
		{"unique local", Options{}, "[fd00::1]:5000/x", []string{"unique local"}},
		{"NAT64 of metadata", Options{}, "[64:ff9b::a9fe:a9fe]:443/x", []string{"NAT64 of 169.254.169.254"}},
		{"mapped loopback", Options{}, "[::ffff:127.0.0.1]:5000/x", []string{"loopback"}},
		{"listed host:port", Options{AllowRegistries: []string{"127.0.0.1:5000"}}, "127.0.0.1:5000/x", nil},
		{"listed host:port, other port", Options{AllowRegistries: []string{"127.0.0.1:5000"}}, "127.0.0.1:5001/x", []string{"loopback"}},
		{"listed host, any port", Options{AllowRegistries: []string{"LOCALHOST"}}, "localhost:5000/x", nil},
		{"listed host:443, no port", Options{AllowRegistries: []string{"10.0.0.9:443"}}, "10.0.0.9/x", nil},
		{"docker hub normalised", Options{AllowRegistries: []string{"index.docker.io"}}, "ubuntu", nil},
		{"public literal", Options{}, "8.8.8.8/x", nil},
		{"local reference", Options{}, "oci-layout:/nowhere", nil},
		// A pod pool's kubelets would pull what a client names: the same
		// rule, on the cluster's network.
		{"cluster images, private", Options{ClusterImages: true}, "10.0.0.5:5000/x", []string{"RFC 1918", "--allow-registry"}},
		{"cluster images, listed", Options{ClusterImages: true, AllowRegistries: []string{"10.0.0.5:5000"}}, "10.0.0.5:5000/x", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Logger = slog.New(slog.DiscardHandler)
			if !tc.o.ClusterImages {
				tc.o.Images = store
			}
			s := &Server{o: tc.o}
			err := s.checkRegistry(context.Background(), tc.ref)
			if tc.refused == nil {
				if err != nil {
					t.Errorf("%s refused: %v", tc.ref, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s let through", tc.ref)
			}
			for _, want := range tc.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not name %q", err, want)
				}
			}
		})
	}
}

// countingServer is an HTTP server on loopback that counts the
// connections it accepted.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func startCounting(t *testing.T, h http.HandlerFunc) *countingServer {
	c := &countingServer{}
	c.Server = httptest.NewUnstartedServer(h)
	c.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

func (c *countingServer) host() string { u, _ := url.Parse(c.URL); return u.Host }

// The store's transport holds every connection to the same rule: a
// registry that is not listed is never dialled, nor is a host an allowed
// registry redirects to; an allowed one answers, but its error bodies
// reach the store with only their status and known registry codes, the
// rest in the log. Through a proxy of the environment's, the proxy is
// dialled and the target judged here.
func TestRegistryTransport(t *testing.T) {
	const canary = "EVALSI-REGISTRY-CANARY-7f3a"
	other := startCounting(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, canary) })
	reg := startCounting(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/":
			io.WriteString(w, "{}")
		case "/v2/text":
			http.Error(w, "etcd says: "+canary, http.StatusNotFound)
		case "/v2/json":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s"},{"code":"%s","detail":"x"}]}`, canary, canary)
		case "/v2/redirect":
			http.Redirect(w, r, other.URL+"/v2/", http.StatusTemporaryRedirect)
		}
	})
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	get := func(t *testing.T, g *registryGuard, u string) (int, string, error) {
		t.Helper()
		resp, err := (&http.Client{Transport: g.transport()}).Get(u)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	none, _ := newRegistryGuard(nil, logger)
	if _, _, err := get(t, none, reg.URL+"/v2/"); err == nil || !strings.Contains(err.Error(), "--allow-registry "+reg.host()) {
		t.Errorf("an unlisted loopback registry: %v, want a refusal naming --allow-registry", err)
	}
	if n := reg.conns.Load(); n != 0 {
		t.Fatalf("the unlisted registry accepted %d connection(s)", n)
	}

	g, err := newRegistryGuard([]string{reg.host()}, logger)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/v2/", http.StatusOK, "{}"},
		{"/v2/text", http.StatusNotFound, ""},
		{"/v2/json", http.StatusUnauthorized, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"the registry's message is in the sandbox pool's log"}]}`},
	} {
		code, body, err := get(t, g, reg.URL+tc.path)
		if err != nil || code != tc.status || body != tc.body {
			t.Errorf("GET %s: %d %q %v, want %d %q", tc.path, code, body, err, tc.status, tc.body)
		}
	}
	if !strings.Contains(logged.String(), "etcd says: "+canary) {
		t.Errorf("the error body is not in the log: %s", logged.String())
	}
	if _, _, err := get(t, g, reg.URL+"/v2/redirect"); err == nil || !strings.Contains(err.Error(), "--allow-registry "+other.host()) {
		t.Errorf("a redirect to an unlisted loopback host: %v, want a refusal", err)
	}
	if n := other.conns.Load(); n != 0 {
		t.Errorf("the host the registry redirected to accepted %d connection(s)", n)
	}

	// Through a proxy: a forward proxy on loopback, which the environment
	// names (not a listed registry, yet dialled), relaying to reg.
	proxy := startCounting(t, func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "via proxy "+r.URL.Host)
	})
	pu, _ := url.Parse(proxy.URL)
	g.envProxy = http.ProxyURL(pu)
	if code, body, err := get(t, g, reg.URL+"/v2/"); err != nil || code != http.StatusOK || body != "via proxy "+reg.host() {
		t.Errorf("an allowed registry through the proxy: %d %q %v", code, body, err)
	}
	before := proxy.conns.Load()
	if _, _, err := get(t, g, other.URL+"/v2/"); err == nil || !strings.Contains(err.Error(), "--allow-registry") {
		t.Errorf("an unlisted loopback host through the proxy: %v, want a refusal", err)
	}
	if n := proxy.conns.Load() - before; n != 0 {
		t.Errorf("the proxy was asked for an unlisted host (%d connection(s))", n)
	}
}

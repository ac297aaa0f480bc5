package remote_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/registrytest"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
)

// countingListener accepts TCP connections on loopback, counts them and
// closes them: whatever speaks to it, it answers nothing.
func countingListener(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// A client naming an image on the pool's own loopback (by address or by
// localhost), to resolve it, to verify it or to make a sandbox of it, is
// refused with a message naming --allow-registry, and the listener there
// never sees a connection.
func TestPoolRefusesRegistriesOnItsMachine(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	p := run.Dial(t, "ssrf")
	addr, conns := countingListener(t)
	_, port, _ := net.SplitHostPort(addr)
	key := "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
	for _, ref := range []string{addr + "/evalsi/x:1", "localhost:" + port + "/evalsi/x:1"} {
		for name, try := range map[string]func() error{
			"resolve": func() error { _, err := p.Images().Resolve(t.Context(), ref); return err },
			"verify": func() error {
				_, err := p.Images().ResolveVerified(t.Context(), ref, []string{key}, false)
				return err
			},
			"create": func() error {
				sb, err := p.Rung().Create(t.Context(), sandbox.Config{Image: ref, Workdir: "/workspace"})
				if sb != nil {
					sb.Close(context.Background())
				}
				return err
			},
		} {
			if err := try(); err == nil || !strings.Contains(err.Error(), "--allow-registry") || !strings.Contains(err.Error(), "loopback") {
				t.Errorf("%s %s: %v, want a refusal naming --allow-registry", name, ref, err)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connection(s)", n)
	}
}

// With AllowRegistries naming it, a real registry on the pool's loopback
// serves the pool: the local benchmark image pushed there is resolved by
// the pool and runs in one of its sandboxes. A pool without the entry
// refuses the same registry.
func TestPoolPullsFromAnAllowedRegistry(t *testing.T) {
	reg := registrytest.Start(t)
	ref := reg.PushLayout(t, benchimage.Ref(t, "../.."), "evalsi/bench", "1")

	if _, err := pooltest.Start(t, pooltest.Options{}).Dial(t, "unlisted").Images().Resolve(t.Context(), ref); err == nil || !strings.Contains(err.Error(), "--allow-registry "+reg.Host) {
		t.Errorf("a pool without --allow-registry resolved %s: %v", ref, err)
	}

	p := pooltest.Start(t, pooltest.Options{AllowRegistries: []string{reg.Host}}).Dial(t, "listed")
	img, err := p.Images().Resolve(t.Context(), ref)
	if err != nil || img.Digest == "" {
		t.Fatalf("resolving %s in a pool that lists its registry: %+v, %v", ref, img, err)
	}
	sb, err := p.Rung().Create(t.Context(), sandbox.Config{Image: ref, ImageDigest: img.Digest, Workdir: "/workspace"})
	if err != nil {
		t.Fatalf("a sandbox of %s: %v", ref, err)
	}
	defer sb.Close(context.Background())
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "/etc/debian_version"}})
	if err != nil || res.ExitCode != 0 || len(res.Stdout) == 0 {
		t.Errorf("cat /etc/debian_version in the image's sandbox: %+v, %v", res, err)
	}
}

// What a registry answers in an error's body never reaches the client:
// a fake registry (a real HTTP server, listed) answering the manifest
// requests with a canary, as text or inside the distribution spec's error
// JSON, makes the pull fail with the status and the error code only.
func TestPoolRegistryErrorsOmitTheBody(t *testing.T) {
	const canary = "EVALSI-REGISTRY-BODY-CANARY-91c2"
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/":
			fmt.Fprint(w, "{}")
		case strings.HasPrefix(r.URL.Path, "/v2/text/"):
			http.Error(w, "etcd: "+canary, http.StatusNotFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s","detail":"%s"}]}`, canary, canary)
		}
	}))
	defer fake.Close()
	host := strings.TrimPrefix(fake.URL, "http://")
	p := pooltest.Start(t, pooltest.Options{AllowRegistries: []string{host}}).Dial(t, "errors")
	for _, tc := range []struct{ repo, want string }{
		{"text", "404"},
		{"json", "MANIFEST_UNKNOWN"},
	} {
		ref := host + "/" + tc.repo + "/x:1"
		_, err := p.Images().Resolve(t.Context(), ref)
		if err == nil {
			t.Fatalf("resolving %s from the fake registry succeeded", ref)
		}
		if strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("resolving %s: %v; want %s and not the registry's body", ref, err, tc.want)
		}
	}
}

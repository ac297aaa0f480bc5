package remote_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"evals.si/egress"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/sandbox/pool/wire"
	"evals.si/sandbox/remote"
)

// A client without a certificate, with a self-signed one, or with one from
// another CA cannot even say hello: TLS refuses it, and Dial reports an
// infrastructure error naming the pool.
func TestLeaseNeedsValidClientCertificate(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	self := pooltest.Issue(t, nil, "self-signed", false)
	other := pooltest.Issue(t, pooltest.NewCA(t, "other-ca"), "other-ca-client", false)
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{{"no certificate", nil}, {"self-signed", &self}, {"another CA", &other}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := remote.Dial(t.Context(), remote.Options{Address: run.Addr, TLS: run.ClientTLS(tc.cert)})
			var pe *remote.PoolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), run.Addr) {
				t.Fatalf("Dial: %v; want a PoolError naming %s", err, run.Addr)
			}
			// And no request gets past TLS, whatever it asks.
			c := rawClient(run, tc.cert)
			if _, err := c.do(http.MethodPost, wire.PathSandboxes, wire.CreateRequest{Workdir: "/workspace"}); err == nil || !strings.Contains(err.Error(), "tls") {
				t.Errorf("creating a sandbox without a valid certificate: %v; want a TLS error", err)
			}
		})
	}
	// The valid client is let in, and told who it is.
	p := run.Dial(t, "worker-1")
	if h := p.Hello(); h.Rung != sandbox.RungBwrap || !strings.Contains(h.Identity, "CN=worker-1") || !h.Capabilities.Snapshot || h.Capabilities.MaxFileBytes == 0 {
		t.Errorf("hello %+v", h)
	}
}

// raw talks to the pool as one certificate, naming any id it likes.
type raw struct {
	base string
	c    *http.Client
}

func rawClient(run *pooltest.Running, cert *tls.Certificate) *raw {
	return &raw{base: "https://" + run.Addr, c: &http.Client{Transport: &http.Transport{TLSClientConfig: run.ClientTLS(cert)}, Timeout: time.Minute}}
}

// do sends in as JSON and returns the body of a 2xx answer, else an error
// with the status.
func (r *raw) do(method, path string, in any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.base+path, body)
	resp, err := r.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	return b, nil
}

func (r *raw) create(t *testing.T, req wire.CreateRequest) string {
	t.Helper()
	b, err := r.do(http.MethodPost, wire.PathSandboxes, req)
	if err != nil {
		t.Fatal(err)
	}
	var c wire.Created
	json.Unmarshal(b, &c)
	return c.ID
}

// A valid client cannot touch another client's sandbox, snapshot or proxy
// ids, even with a certificate of the same name, nor make a sandbox over a
// path of the pool's machine: every attempt is refused and the owner's
// objects are unharmed.
func TestClientsCannotTouchOthersObjects(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	a := run.Dial(t, "worker-a")
	ctx := t.Context()
	// Worker a's objects: a proxy, a snapshot and a sandbox using both.
	px, err := a.Egress().StartProxy(ctx, egress.Policy{AllowHosts: []string{"example.test:443"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	setup, err := a.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.WriteFile(ctx, "a.txt", []byte("a's file"), 0o644); err != nil {
		t.Fatal(err)
	}
	layer, err := setup.(sandbox.Snapshotter).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	setup.Close(ctx)
	sb, err := a.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer},
		Policy: sandbox.Policy{Network: sandbox.NetworkAllowlist, AllowHosts: []string{"example.test"}, ProxyAddr: px.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	sbID := sb.(interface{ ID() string }).ID()
	pxID := strings.TrimPrefix(px.Addr(), wire.ProxyPrefix)

	for _, who := range []struct {
		name string
		cert tls.Certificate
	}{
		{"another client", pooltest.Issue(t, run.ClientCA, "worker-b", false)},
		{"a second certificate of the same name", pooltest.Issue(t, run.ClientCA, "worker-a", false)},
	} {
		t.Run(who.name, func(t *testing.T) {
			b := rawClient(run, &who.cert)
			for _, tc := range []struct {
				name, method, path string
				body               any
			}{
				{"exec in a's sandbox", http.MethodPost, wire.PathSandboxes + "/" + sbID + "/exec", sandbox.ExecRequest{Argv: []string{"true"}}},
				{"read a's file", http.MethodGet, wire.PathSandboxes + "/" + sbID + "/files?path=a.txt", nil},
				{"snapshot a's sandbox", http.MethodPost, wire.PathSandboxes + "/" + sbID + "/snapshot", nil},
				{"close a's sandbox", http.MethodDelete, wire.PathSandboxes + "/" + sbID, nil},
				{"sandbox over a's snapshot", http.MethodPost, wire.PathSandboxes, wire.CreateRequest{Workdir: "/w", Snapshots: []string{layer.Ref}}},
				{"delete a's snapshot", http.MethodDelete, wire.PathSnapshots + "/" + layer.Ref, nil},
				{"sandbox behind a's proxy", http.MethodPost, wire.PathSandboxes, wire.CreateRequest{Workdir: "/w", Policy: wire.Policy{Network: sandbox.NetworkAllowlist, Proxy: pxID}}},
				{"read a's proxy events", http.MethodGet, wire.PathProxies + "/" + pxID + "/events", nil},
				{"widen a's proxy", http.MethodPut, wire.PathProxies + "/" + pxID + "/policy", wire.ProxyRequest{Policy: egress.Policy{AllowAll: true}}},
				{"close a's proxy", http.MethodDelete, wire.PathProxies + "/" + pxID, nil},
			} {
				if _, err := b.do(tc.method, tc.path, tc.body); err == nil || !strings.Contains(err.Error(), "404") {
					t.Errorf("%s: %v; want 404", tc.name, err)
				}
			}
			if gone := keepalive(t, b, sbID, layer.Ref, pxID); len(gone) != 3 {
				t.Errorf("keepalive of a's ids: gone %v, want all three", gone)
			}
		})
	}
	// Paths of the pool's machine are refused in every field that could
	// carry one.
	b := rawClient(run, func() *tls.Certificate { c := pooltest.Issue(t, run.ClientCA, "worker-c", false); return &c }())
	for _, tc := range []struct {
		name string
		body any
	}{
		{"proxy as Docker's socket", wire.CreateRequest{Workdir: "/w", Policy: wire.Policy{Network: sandbox.NetworkAllowlist, Proxy: "unix:/var/run/docker.sock"}}},
		{"proxy as a host port", wire.CreateRequest{Workdir: "/w", Policy: wire.Policy{Network: sandbox.NetworkAllowlist, Proxy: "127.0.0.1:22"}}},
		{"snapshot as a directory", wire.CreateRequest{Workdir: "/w", Snapshots: []string{"/etc"}}},
		{"image as a local path", wire.CreateRequest{Workdir: "/w", Image: "dir:/", ImageDigest: ""}},
		{"cgroup as a directory", wire.CreateRequest{Workdir: "/w", Limits: wire.Limits{Cgroup: "/sys/fs/cgroup"}}},
		{"a root", map[string]any{"workdir": "/w", "root": "/"}},
		{"a state dir", map[string]any{"workdir": "/w", "state_dir": "/etc"}},
	} {
		if _, err := b.do(http.MethodPost, wire.PathSandboxes, tc.body); err == nil {
			t.Errorf("%s: the pool made the sandbox", tc.name)
		}
	}
	// Nor may a proxy of the pool reach the pool's own machine, where the
	// other clients' proxies listen.
	for _, pol := range []egress.Policy{
		{AllowHosts: []string{"127.0.0.1:22"}},
		{AllowHosts: []string{"localhost:80"}},
		{AllowHosts: []string{"[::1]:8080"}},
		{AllowHosts: []string{"169.254.169.254:80"}},
		{AllowHosts: []string{"example.test:443"}, AllowPrivate: true},
	} {
		if _, err := b.do(http.MethodPost, wire.PathProxies, wire.ProxyRequest{Policy: pol}); err == nil {
			t.Errorf("the pool started a proxy allowing %v (allow_private %v)", pol.AllowHosts, pol.AllowPrivate)
		}
		if err := px.SetPolicy(pol); err == nil {
			t.Errorf("the pool widened a proxy to %v (allow_private %v)", pol.AllowHosts, pol.AllowPrivate)
		}
	}
	// a's objects are unharmed.
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"cat", "a.txt"}})
	if err != nil || string(res.Stdout) != "a's file" {
		t.Errorf("a's sandbox after the attempts: %q, %v", res.Stdout, err)
	}
	if err := px.SetPolicy(egress.Policy{AllowHosts: []string{"example.test:443"}}); err != nil {
		t.Errorf("a's proxy after the attempts: %v", err)
	}
}

func keepalive(t *testing.T, r *raw, ids ...string) []string {
	b, err := r.do(http.MethodPost, wire.PathKeepalive, wire.Keepalive{IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	var res wire.KeepaliveResult
	json.Unmarshal(b, &res)
	return res.Gone
}

// A lease that is not kept alive expires: its sandbox is closed (its
// processes end) and its id is gone; one a client keeps alive lives on.
func TestLeaseExpires(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{LeaseTTL: 500 * time.Millisecond})
	cert := pooltest.Issue(t, run.ClientCA, "forgetful", false)
	r := rawClient(run, &cert)
	id := r.create(t, wire.CreateRequest{Workdir: "/workspace"})
	token := fmt.Sprintf("%d.%d", 40000+os.Getpid()%10000, time.Now().UnixNano()%1000)
	if _, err := r.do(http.MethodPost, wire.PathSandboxes+"/"+id+"/services", sandbox.ExecRequest{Argv: []string{"sleep", token}}); err != nil {
		t.Fatal(err)
	}
	kept := run.Dial(t, "keeper")
	sb, err := kept.Rung().Create(t.Context(), sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := r.do(http.MethodPost, wire.PathSandboxes+"/"+id+"/exec", sandbox.ExecRequest{Argv: []string{"true"}})
		if err != nil && strings.Contains(err.Error(), "404") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not kept alive but the sandbox still answers: %v", err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); len(procsWith(token)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the expired sandbox's service still runs: pids %v", procsWith(token))
		}
	}
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("the kept-alive sandbox after the other expired: %+v, %v", res, err)
	}
}

func procsWith(token string) []string {
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(token)) {
			found = append(found, d.Name())
		}
	}
	return found
}

// Files are capped by the pool's max_file_bytes, in both directions, with
// an error naming the path and the cap; output is capped as a local rung
// caps it; cancelling an Exec's context kills its command in the pool.
func TestTransferCapsAndExecCancel(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{MaxFileBytes: 1024})
	p := run.Dial(t, "capped")
	ctx := t.Context()
	sb, err := p.Rung().Create(ctx, sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if err := sb.WriteFile(ctx, "big.txt", bytes.Repeat([]byte("x"), 2000), 0o644); err == nil || !strings.Contains(err.Error(), "big.txt") || !strings.Contains(err.Error(), "1024") {
		t.Errorf("writing 2000 bytes over a 1024-byte cap: %v", err)
	}
	if err := sb.WriteFile(ctx, "ok.txt", bytes.Repeat([]byte("y"), 1024), 0o644); err != nil {
		t.Errorf("writing 1024 bytes: %v", err)
	}
	if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 5000 /dev/zero > made.bin"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := sb.ReadFile(ctx, "made.bin"); err == nil || !strings.Contains(err.Error(), "made.bin") || !strings.Contains(err.Error(), "1024") {
		t.Errorf("reading 5000 bytes over a 1024-byte cap: %v", err)
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2"}, OutputLimit: 100000})
	if err != nil || len(res.Stdout) != 100000 || len(res.Stderr) != 10 || !res.Truncated {
		t.Errorf("output over the limit: stdout %d stderr %d truncated %v, %v; want 100000, 10, true", len(res.Stdout), len(res.Stderr), res.Truncated, err)
	}

	token := fmt.Sprintf("%d.%d", 50000+os.Getpid()%10000, time.Now().UnixNano()%1000)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(cctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "touch started; exec sleep " + token}})
		errc <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); len(procsWith(token)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
	}
	cancel()
	if err := <-errc; err == nil {
		t.Errorf("a cancelled Exec returned no error")
	}
	for deadline := time.Now().Add(30 * time.Second); len(procsWith(token)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled command still runs in the pool: pids %v", procsWith(token))
		}
	}
}

// The pool makes a sandbox only from the image the client resolved: a
// digest that is not the pool's image's is refused.
func TestPoolRefusesAnotherDigest(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{AllowLocalImages: true})
	p := run.Dial(t, "digests")
	ref := benchimage.Ref(t, "../..")
	img, err := p.Images().Resolve(t.Context(), ref)
	if err != nil || img.Digest == "" {
		t.Fatalf("resolving %s in the pool: %+v, %v", ref, img, err)
	}
	cfg := sandbox.Config{Image: ref, ImageDigest: "sha256:" + strings.Repeat("0", 64), Workdir: "/workspace"}
	if sb, err := p.Rung().Create(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), img.Digest) {
		if sb != nil {
			sb.Close(context.Background())
		}
		t.Errorf("a sandbox of %s with another digest: %v; want a refusal naming %s", ref, err, img.Digest)
	}
	cfg.ImageDigest = img.Digest
	sb, err := p.Rung().Create(t.Context(), cfg)
	if err != nil {
		t.Fatalf("a sandbox of %s at its digest: %v", ref, err)
	}
	defer sb.Close(context.Background())
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat", "/etc/debian_version"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("the image's sandbox: %+v, %v", res, err)
	}
}

package environment

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"evals.si/egress"
	"evals.si/image"
	"evals.si/internal/testenv/benchimage"
	"evals.si/internal/testenv/nethost"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/spec"
)

// debianManager is a manager whose environments use the local Debian
// image (it has python3).
func debianManager(t *testing.T) (*Manager, string) {
	t.Helper()
	ref := benchimage.Ref(t, "..")
	imgs, err := image.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(imgs, []sandbox.Rung{bwraptest.Rung(t)}, t.TempDir(), slog.Default())
	t.Cleanup(func() { m.Close() })
	return m, ref
}

// sharedEnv is an environment whose setup every variant shares; with
// changes its trial policy, not its setup.
func sharedEnv(ref string, with func(*spec.SandboxPolicy)) *spec.Environment {
	env := &spec.Environment{
		Image:   ref,
		Files:   map[string]string{"a.txt": "shared\n"},
		Setup:   spec.Steps("echo setup >> setup.log"),
		Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, Workdir: "/work"},
	}
	if with != nil {
		with(env.Sandbox)
	}
	return env
}

// Records sharing image, files and setup share one setup, yet each trial's
// sandbox has its own record's network and limits, whichever record was
// prepared first: the unlimited allowlist record goes first, and the deny
// record after it still cannot allocate past its 256 MB.
func TestTrialsSharingSetupGetTheirOwnPolicy(t *testing.T) {
	m, ref := debianManager(t)
	ctx := context.Background()
	open := sharedEnv(ref, func(p *spec.SandboxPolicy) {
		p.Network, p.AllowHosts = sandbox.NetworkAllowlist, []string{"example.test:443"}
	})
	tight := sharedEnv(ref, func(p *spec.SandboxPolicy) { p.MemoryMB = 256 })
	p1, err := m.Prepare(ctx, open, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Prepare(ctx, tight, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 {
		t.Fatal("records differing only in trial policy did not share their setup")
	}

	proxy := egress.New(egress.Policy{AllowHosts: open.Sandbox.AllowHosts, SocketDir: t.TempDir()}, nil, nil)
	if err := proxy.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	pol := TrialPolicy(open)
	pol.ProxyAddr = proxy.UnixAddr()
	a, err := p1.NewSandbox(ctx, open, pol, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := p2.NewSandbox(ctx, tight, TrialPolicy(tight), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)

	if r := a.Report(); r.Network != sandbox.NetworkAllowlist || r.ProxyAddr != proxy.UnixAddr() {
		t.Errorf("allowlist record's report: network %q proxy %q", r.Network, r.ProxyAddr)
	}
	if r := b.Report(); r.Network != sandbox.NetworkDeny || r.ProxyAddr != "" {
		t.Errorf("deny record's report: network %q proxy %q", r.Network, r.ProxyAddr)
	}
	const alloc = `python3 -c "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"`
	for _, tc := range []struct {
		name string
		sb   sandbox.Sandbox
		ok   bool
	}{{"no memory limit", a, true}, {"memory_mb 256", b, false}} {
		res, err := tc.sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", alloc}})
		if err != nil {
			t.Fatal(err)
		}
		got := res.ExitCode == 0 && strings.Contains(string(res.Stdout), "allocated")
		if got != tc.ok {
			t.Errorf("%s: allocating 600 MB: exit %d, %q %q, denials %v; want success %v", tc.name, res.ExitCode, res.Stdout, res.Stderr, res.Denials, tc.ok)
		}
	}
	if got := run(t, b, "cat setup.log"); got != "setup\n" {
		t.Errorf("setup.log = %q: setup must have run once, shared", got)
	}
}

// image_signatures are checked for each environment that names them, even
// when another environment with the same image and setup was prepared (and
// verified nothing): a key set the image is not signed by gets no sandbox,
// one that is satisfied (allow_local) does.
func TestSignaturesCheckedPerEnvironment(t *testing.T) {
	m, ref := debianManager(t)
	ctx := context.Background()
	unsigned := sharedEnv(ref, nil)
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	key := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	signed := sharedEnv(ref, func(p *spec.SandboxPolicy) {
		p.ImageSignatures = &spec.ImageSignatures{Keys: []string{key}}
	})
	local := sharedEnv(ref, func(p *spec.SandboxPolicy) {
		p.ImageSignatures = &spec.ImageSignatures{Keys: []string{key}, AllowLocal: true}
	})

	p, err := m.Prepare(ctx, unsigned, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.NewSandbox(ctx, unsigned, TrialPolicy(unsigned), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb.Close(ctx)
	for range 2 { // a refusal is not remembered as a success
		ps, err := m.Prepare(ctx, signed, SetupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ps != p {
			t.Fatal("an environment differing only in image_signatures did not share the setup")
		}
		sb, err = ps.NewSandbox(ctx, signed, TrialPolicy(signed), SetupOptions{})
		var ie *InfraError
		if !errors.As(err, &ie) || ie.Phase != "image" || !strings.Contains(err.Error(), "signature") {
			if sb != nil {
				sb.Close(ctx)
			}
			t.Fatalf("an unsigned image with image_signatures got a sandbox or the wrong error: %v", err)
		}
	}
	sb, err = p.NewSandbox(ctx, local, TrialPolicy(local), SetupOptions{})
	if err != nil {
		t.Fatalf("allow_local on a local image: %v", err)
	}
	sb.Close(ctx)
}

// A prepared environment makes sandboxes only for environments of its own
// setup and rung choice: another min_isolation or ladder is refused.
func TestNewSandboxRefusesAnotherEnvironment(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	env := &spec.Environment{Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}}}
	p, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []*spec.Environment{
		{Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, MinIsolation: "vm"}},
		{Sandbox: &spec.SandboxPolicy{Ladder: []string{"landlock"}}},
		{Setup: spec.Steps("true"), Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}}},
	} {
		sb, err := p.NewSandbox(ctx, other, TrialPolicy(other), SetupOptions{})
		if err == nil {
			sb.Close(ctx)
			t.Errorf("%+v got a sandbox from another environment's preparation", other.Sandbox)
		}
	}
}

// setup_network: allow reaches other hosts through an allow-all egress
// proxy, never the engine's own loopback.
func TestSetupNetworkAllowGoesThroughTheProxy(t *testing.T) {
	m, ref := debianManager(t)
	h := nethost.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "LOOPBACK") }))
	get := func(addr, out string) string {
		return fmt.Sprintf(`python3 -c "import urllib.request as u
try: open('%s', 'w').write(u.urlopen('http://%s/', timeout=20).read().decode())
except Exception as e: open('%s', 'w').write('FAILED %%s' %% e)"`, out, addr, out)
	}
	env := sharedEnv(ref, nil)
	env.SetupNetwork = "allow"
	env.Setup = spec.Steps(get(h.Addr, "remote.txt"), get(ln.Addr().String(), "local.txt"))
	ctx := context.Background()
	p, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if got := run(t, sb, "cat remote.txt"); got != h.Body {
		t.Errorf("setup fetched %q from the test host, want %q", got, h.Body)
	}
	if got := run(t, sb, "cat local.txt"); !strings.HasPrefix(got, "FAILED") {
		t.Errorf("setup reached the engine's loopback: %q", got)
	}
}

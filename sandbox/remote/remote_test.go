package remote_test

import (
	"os"
	"testing"

	"evals.si/egress"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/sandbox/pool/wire"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// suite runs a pool with the bwrap rung and returns the remote rung and the
// suites' options for it.
func suite(t *testing.T) (func(t *testing.T) sandbox.Rung, sandboxtest.Options) {
	run := pooltest.Start(t, pooltest.Options{AllowLocalImages: true})
	p := run.Dial(t, "suite-worker")
	o := sandboxtest.Options{Gaps: map[string]string{}}
	if os.Geteuid() != 0 {
		o.Gaps[sandboxtest.CapMemoryDenial] = "not root: the pool's bwrap bounds memory by RLIMIT_AS, whose failures are only visible on stderr"
	}
	// The user subtest needs an image with a writable /etc: the local
	// Debian image, resolved by the pool and named by reference and digest.
	o.Users = func(t *testing.T, c *sandbox.Config) {
		ref := benchimage.Ref(t, "../..")
		img, err := p.Images().Resolve(t.Context(), ref)
		if err != nil {
			t.Fatalf("resolving %s in the pool: %v", ref, err)
		}
		c.Image, c.ImageDigest = ref, img.Digest
	}
	// The allowlist row's test proxy runs in this process, which is the
	// pool's machine: the pool adopts it for this client.
	o.ProxyAddr = func(t *testing.T, px *sandboxtest.Proxy) string {
		return wire.ProxyPrefix + run.Server.AddProxy(p.Hello().Identity, fixedProxy(px.UnixAddr))
	}
	return func(t *testing.T) sandbox.Rung { return p.Rung() }, o
}

// fixedProxy is a proxy the test runs itself.
type fixedProxy string

func (f fixedProxy) Addr() string                  { return string(f) }
func (f fixedProxy) SetPolicy(egress.Policy) error { return nil }
func (f fixedProxy) Close() error                  { return nil }

func TestConformance(t *testing.T) {
	newRung, o := suite(t)
	sandboxtest.Conformance(t, newRung, o)
}

func TestEscapes(t *testing.T) {
	newRung, o := suite(t)
	sandboxtest.Escapes(t, newRung, o)
}

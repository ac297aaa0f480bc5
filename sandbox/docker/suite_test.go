package docker

import (
	"os"
	"testing"

	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/sandboxtest"
)

// TestMain lets the test binary serve as the allowlist proxy forwarder
// inside containers.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func suiteOptions() sandboxtest.Options {
	return sandboxtest.Options{
		// The local Debian image: a writable /etc with passwd, group, id.
		Users: func(t *testing.T, c *sandbox.Config) { c.Root = debianRoot(t) },
		Uncontained: map[string]string{
			sandboxtest.RowPtrace: "docker's default seccomp profile allows ptrace of the container's own processes (safe since Linux 4.8); host processes live in another PID namespace",
		},
	}
}

func newRung(t *testing.T) sandbox.Rung { return requireDocker(t) }

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, suiteOptions()) }

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, suiteOptions()) }

// debianRoot unpacks the local Debian image (scripts/build-local-image.sh).
func debianRoot(t *testing.T) string { return benchimage.Root(t, "../..") }

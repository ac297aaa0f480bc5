package bwrap

import (
	"os"
	"os/exec"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
	"evals.si/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// newRung returns the rung, skipping (failing under EVALSI_STRICT) when
// bubblewrap is missing or cannot create namespaces here.
func newRung(t *testing.T) sandbox.Rung {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bwrap is not on PATH (apt-get install bubblewrap)")
	}
	r := New(Options{})
	if p := r.Probe(t.Context()); !p.Works {
		testenv.Missing(t, "bwrap", p.Reason)
	}
	return r
}

func suiteOptions() sandboxtest.Options {
	o := sandboxtest.Options{Gaps: map[string]string{}}
	// Users are added to an image's /etc as a Dockerfile's useradd would;
	// without an image /etc is the host's, read-only.
	o.Users = func(t *testing.T, c *sandbox.Config) { c.Root = debianRoot(t) }
	if os.Geteuid() != 0 {
		// Without cgroups, memory is capped by RLIMIT_AS: allocations fail
		// and the denial is only inferred from the program's stderr.
		o.Gaps[sandboxtest.CapMemoryDenial] = "not root: memory is bounded by RLIMIT_AS, whose failures are only visible on stderr"
	}
	return o
}

func TestConformance(t *testing.T) {
	sandboxtest.Conformance(t, newRung, suiteOptions())
}

func TestEscapes(t *testing.T) {
	sandboxtest.Escapes(t, newRung, suiteOptions())
}

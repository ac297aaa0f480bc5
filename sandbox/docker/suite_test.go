package docker

import (
	"testing"

	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

func suiteOptions() sandboxtest.Options {
	return sandboxtest.Options{
		Uncontained: map[string]string{
			sandboxtest.RowPtrace: "docker's default seccomp profile allows ptrace of the container's own processes (safe since Linux 4.8); host processes live in another PID namespace",
		},
	}
}

func newRung(t *testing.T) sandbox.Rung { return requireDocker(t) }

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, suiteOptions()) }

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, suiteOptions()) }

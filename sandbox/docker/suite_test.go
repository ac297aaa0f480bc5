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
		NotRun: map[string]string{
			sandboxtest.RowAllowlistBypass: "the docker rung refuses network: allowlist at Create (no forwarder to the egress proxy yet), so there is no allowlist to bypass",
		},
	}
}

func newRung(t *testing.T) sandbox.Rung { return requireDocker(t) }

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, suiteOptions()) }

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, suiteOptions()) }

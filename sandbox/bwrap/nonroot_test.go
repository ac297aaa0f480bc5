package bwrap

import (
	"slices"
	"testing"

	"evals.si/internal/testenv/engineuser"
	"evals.si/sandbox"
)

// The engine's paths as a non-root user: TestNonRootEngine, run as root,
// runs this test binary's TestAsEngineUser as each engine user
// internal/testenv/engineuser provides; sandbox/landlock does the same.
func TestNonRootEngine(t *testing.T) { engineuser.RerunEach(t, "TestAsEngineUser") }

// TestAsEngineUser (the inner run): bwrap runs as root of the multi-id
// namespace, with Docker's capabilities; with the single-id map it uses
// its own namespace, with none.
func TestAsEngineUser(t *testing.T) {
	var caps []string
	if len(engineuser.WantUIDMap(t)) > 1 {
		caps = slices.Sorted(slices.Values(sandbox.ContainerCapabilities))
	}
	engineuser.Check(t, create(t, sandbox.Config{}), caps)
}

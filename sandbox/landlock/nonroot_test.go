package landlock

import (
	"testing"

	"evals.si/internal/testenv/engineuser"
	"evals.si/sandbox"
)

// The engine's paths as a non-root user: TestNonRootEngine, run as root,
// runs this test binary's TestAsEngineUser as each engine user
// internal/testenv/engineuser provides; sandbox/bwrap does the same.
func TestNonRootEngine(t *testing.T) { engineuser.RerunEach(t, "TestAsEngineUser") }

// TestAsEngineUser (the inner run): the launcher is root of its namespace
// with either map, so it holds Docker's capabilities.
func TestAsEngineUser(t *testing.T) {
	engineuser.WantUIDMap(t)
	engineuser.Check(t, newSandbox(t, sandbox.Config{}), sandbox.ContainerCapabilities)
	// The holder's paths as this user: a per-command user (or the error
	// for one outside a map of root alone), a service that outlives
	// commands and runs as its user's mapped id, and the /etc files.
	t.Run("ExecUserMap", TestExecUserMap)
	t.Run("Service", TestServiceOutlivesCommandsNotTheirLeftovers)
	t.Run("EtcFiles", TestEtcFilesWithReadOnlyRoot)
}

package embedded

import (
	"os"
	"testing"

	"evals.si/sandbox/reexec"
)

// Agent runs in these tests use sandbox rungs that re-execute the test
// binary as their launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// Package testenv lets tests that need a host facility (bwrap, docker,
// postgres, chromium…) skip when it is missing on a developer's machine, and
// fail instead under EVALSI_STRICT=1, which .ci/run sets.
package testenv

import (
	"os"
	"testing"
)

// Strict reports whether missing facilities must fail tests.
func Strict() bool { return os.Getenv("EVALSI_STRICT") == "1" }

// Missing skips the test, or fails it under EVALSI_STRICT=1, because the
// named facility is not available for the given reason.
func Missing(t testing.TB, facility, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("%s is required under EVALSI_STRICT=1 but not available: %s", facility, reason)
	}
	t.Skipf("%s not available: %s (set EVALSI_STRICT=1 to make this a failure)", facility, reason)
}

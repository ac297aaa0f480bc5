// Package testenv lets tests that need a host facility (bwrap, docker,
// postgres, chromium…) skip when it is missing on a developer's machine, and
// fail instead under EVALSI_STRICT=1, which .ci/run sets.
package testenv

import (
	"os"
	"path/filepath"
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

// NodeModules returns the directory holding the npm peers .ci/setup installs
// (.ci/npm/package.json): $EVALSI_NPM_DIR, default /usr/local/lib/evalsi/npm. It
// reports the facility missing when pkg (e.g. "@openai/codex") is not
// installed there.
func NodeModules(t testing.TB, pkg string) string {
	t.Helper()
	dir := os.Getenv("EVALSI_NPM_DIR")
	if dir == "" {
		dir = "/usr/local/lib/evalsi/npm"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		Missing(t, "npm package "+pkg, "not installed under "+dir+"/node_modules; run .ci/setup")
	}
	return dir
}

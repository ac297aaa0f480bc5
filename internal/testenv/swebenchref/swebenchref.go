// Package swebenchref finds the official SWE-bench package that
// scripts/python-adapters.sh installs, so differential tests can run it side
// by side with the Go code: swebench==5.0.2 in python/adapters/swebench/.venv
// and, for the classic per-repo tables 5.x no longer carries, swebench==4.1.0
// in .venv/classic, or $EVALSI_SWEBENCH_CLASSIC (the adapter's scripts put
// it on sys.path themselves).
package swebenchref

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
)

// Version is the swebench release the interpreter must have.
const Version = "5.0.2"

// ClassicVersion is the release in .venv/classic.
const ClassicVersion = "4.1.0"

const install = "run scripts/python-adapters.sh"

// AdapterDir is python/adapters/swebench in this checkout, found by
// walking up from the working directory (a test's package directory) to
// the module root.
func AdapterDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding the repository root: %v", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module evals.si\n")) {
			return filepath.Join(dir, "python", "adapters", "swebench")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of module evals.si above the working directory")
		}
		dir = parent
	}
}

// Python returns the reference interpreter: $EVALSI_SWEBENCH_PYTHON, else
// the adapter's .venv/bin/python. It reports the facility missing (a
// failure under EVALSI_STRICT=1) when there is none or it lacks swebench
// 5.0.2 or the classic 4.1.0.
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv("EVALSI_SWEBENCH_PYTHON")
	if py == "" {
		py = filepath.Join(AdapterDir(t), ".venv", "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		testenv.Missing(t, "swebench reference interpreter", fmt.Sprintf("%v; %s", err, install))
	}
	const check = `import importlib.metadata as m, os, sys
classic = os.environ.get("EVALSI_SWEBENCH_CLASSIC") or os.path.join(sys.prefix, "classic")
print(m.version("swebench"))
print(" ".join(d.version for d in m.distributions(path=[classic]) if d.metadata["Name"] == "swebench"))`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", check).Output()
	if err != nil {
		testenv.Missing(t, "swebench reference interpreter", fmt.Sprintf("%s cannot report its swebench version: %v; %s", py, err, install))
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != 2 || got[0] != Version || got[1] != ClassicVersion {
		testenv.Missing(t, "swebench reference interpreter", fmt.Sprintf("%s has swebench %q (classic %q), want %s (classic %s); %s", py, got[0], strings.Join(got[1:], ""), Version, ClassicVersion, install))
	}
	return py
}

// Run runs one of the adapter's scripts (a path relative to AdapterDir)
// with the reference interpreter, stdin as its input, and returns its
// standard output. A failure of the script fails the test with its stderr.
func Run(t testing.TB, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	py := Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(AdapterDir(t), script)}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running the reference %s: %v\n%s", script, err, stderr.Bytes())
	}
	return out
}

package checker

import (
	"os"
	"os/exec"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
)

// The bwrap rung re-executes the test binary as its launcher.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const testWorkdir = "/work/task"

// newSandbox returns a real bubblewrap sandbox over the host's system
// directories (so sh, git and coreutils are there), closed at the end.
func newSandbox(t *testing.T) sandbox.Sandbox { return bwraptest.New(t, testWorkdir) }

// sh runs a shell script in the sandbox's workdir and fails the test unless
// it exits 0.
func sh(t *testing.T, sb sandbox.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Workdir: testWorkdir})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git is not on PATH (apt-get install git)")
	}
}

package bwrap

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

// The small helper binary (cmd/evalsi-sandbox) must do everything the
// engine does as the rung's helper: the whole conformance suite runs with
// it.
func TestConformanceWithHelperBinary(t *testing.T) {
	helper := buildHelper(t)
	sandboxtest.Conformance(t, func(t *testing.T) sandbox.Rung {
		newRung(t) // skips or fails when bwrap does not work here
		return New(Options{Helper: helper})
	}, suiteOptions())
}

func buildHelper(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go toolchain", "needed to build cmd/evalsi-sandbox: "+err.Error())
	}
	path := filepath.Join(t.TempDir(), HelperName)
	cmd := exec.Command(goBin, "build", "-o", path, "evals.si/cmd/evalsi-sandbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/evalsi-sandbox: %v\n%s", err, out)
	}
	return path
}

func TestSameBuild(t *testing.T) {
	bi := func(path, gover, rev, modified string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: gover, Main: debug.Module{Path: path}}
		if rev != "" {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return b
	}
	for _, tc := range []struct {
		name string
		a, b *debug.BuildInfo
		want bool
	}{
		{"same clean revision", bi("evals.si", "go1.26.8", "abc", "false"), bi("evals.si", "go1.26.8", "abc", "false"), true},
		{"other revision", bi("evals.si", "go1.26.8", "abc", "false"), bi("evals.si", "go1.26.8", "abd", "false"), false},
		{"modified tree", bi("evals.si", "go1.26.8", "abc", "true"), bi("evals.si", "go1.26.8", "abc", "true"), false},
		{"no vcs stamp", bi("evals.si", "go1.26.8", "", ""), bi("evals.si", "go1.26.8", "", ""), false},
		{"other Go", bi("evals.si", "go1.26.8", "abc", "false"), bi("evals.si", "go1.26.7", "abc", "false"), false},
		{"other module", bi("evals.si", "go1.26.8", "abc", "false"), bi("example.com/x", "go1.26.8", "abc", "false"), false},
	} {
		if got := sameBuild(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: sameBuild = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A test binary has no helper next to it, so the rung re-executes itself.
func TestDefaultHelperFallsBackToSelf(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DefaultHelper()
	if err != nil {
		t.Fatal(err)
	}
	if got != self {
		t.Errorf("DefaultHelper() = %q, want the test binary %q", got, self)
	}
}

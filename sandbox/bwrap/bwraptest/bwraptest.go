// Package bwraptest gives other packages' tests a real bubblewrap sandbox.
// Test binaries that use it must call reexec.Init first in TestMain, since
// the rung re-executes the binary.
package bwraptest

import (
	"context"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap"
)

// Rung returns the bwrap rung, or skips the test (fails it under
// EVALSI_STRICT=1) when bubblewrap does not work here.
func Rung(t testing.TB) *bwrap.Rung {
	t.Helper()
	r := bwrap.New(bwrap.Options{})
	// The probe also says when bwrap is not installed.
	if p := r.Probe(context.Background()); !p.Works {
		testenv.Missing(t, "bwrap", p.Reason)
	}
	return r
}

// New returns a bwrap sandbox over the host's system directories with the
// given workdir, closed when the test ends.
func New(t testing.TB, workdir string) sandbox.Sandbox {
	t.Helper()
	sb, err := Rung(t).Create(context.Background(), sandbox.Config{Workdir: workdir, StateDir: t.TempDir(), CommandTimeout: time.Minute})
	if err != nil {
		t.Fatalf("creating bwrap sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

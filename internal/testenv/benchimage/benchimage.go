// Package benchimage gives tests the local Debian benchmark image that
// scripts/build-local-image.sh builds (debootstrap, packed as an OCI
// layout, cached), for running benchmark tasks offline. Test support only.
package benchimage

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/image"
	"evals.si/internal/testenv"
)

// Ref builds (or finds cached) the image and returns its oci-layout:
// reference. repoRoot is the module root relative to the test's directory
// (e.g. "../.."). A missing debootstrap or umoci, or a failed build, skips
// the test (fails it under EVALSI_STRICT=1).
func Ref(t testing.TB, repoRoot string) string {
	t.Helper()
	for _, tool := range []string{"debootstrap", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := exec.LookPath("/usr/sbin/" + tool); err != nil {
				testenv.Missing(t, tool, "the local benchmark image is built with debootstrap and umoci")
			}
		}
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "build-local-image.sh"))
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/sbin:"+os.Getenv("PATH"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		testenv.Missing(t, "local benchmark image", "scripts/build-local-image.sh failed: "+err.Error()+"\n"+stderr.String())
	}
	ref := strings.TrimSpace(string(out))
	if !strings.HasPrefix(ref, "oci-layout:") {
		t.Fatalf("build-local-image.sh printed %q, want an oci-layout: reference", ref)
	}
	return ref
}

// Root builds (or finds cached) the image and unpacks it into a store of
// the test's own, returning the unpacked root: for rung tests that take a
// root directory rather than a reference.
func Root(t testing.TB, repoRoot string) string {
	t.Helper()
	ref := Ref(t, repoRoot)
	store, err := image.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	img, err := store.Resolve(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return img.Root
}

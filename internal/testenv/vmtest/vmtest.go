// Package vmtest gives tests what the microVM rungs boot: the guest kernel
// bundle (scripts/build-vm-kernel.sh, cached), evalsi-guest built for the
// test process, a cache directory shared by the tests (root disks of the
// same image are made once), and the local Debian image with its digest.
// Test support only.
package vmtest

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"evals.si/image"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
)

// Kernel is the cached guest kernel (scripts/build-vm-kernel.sh --cached).
func Kernel(t testing.TB, repoRoot string) string {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.Missing(t, "qemu-system-x86_64", "the qemu rung runs its VMs with QEMU (apt-get install qemu-system-x86 qemu-utils)")
	}
	out, err := exec.Command("bash", filepath.Join(repoRoot, "scripts", "build-vm-kernel.sh"), "--cached").Output()
	if err != nil {
		testenv.Missing(t, "guest kernel", "run bash scripts/build-vm-kernel.sh (or .ci/setup): "+err.Error())
	}
	return strings.TrimSpace(string(out))
}

var guest struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Guest builds evalsi-guest (static) once per test process.
func Guest(t testing.TB, repoRoot string) string {
	t.Helper()
	guest.once.Do(func() {
		dir, err := os.MkdirTemp("", "evalsi-guest-")
		if err != nil {
			guest.err = err
			return
		}
		guest.path = filepath.Join(dir, "evalsi-guest")
		cmd := exec.Command("go", "build", "-o", guest.path, "./cmd/evalsi-guest")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		guest.out, guest.err = cmd.CombinedOutput()
	})
	if guest.err != nil {
		t.Fatalf("building evalsi-guest: %v\n%s", guest.err, guest.out)
	}
	return guest.path
}

// CacheDir is the VM rungs' cache the tests share, kept between runs.
func CacheDir(t testing.TB) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(base, "evalsi", "vm-test")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// Settings are the rung settings of a test VM.
func Settings(t testing.TB, repoRoot string) sandbox.VMSettings {
	t.Helper()
	return sandbox.VMSettings{Kernel: Kernel(t, repoRoot), Guest: Guest(t, repoRoot), VCPUs: 1, MemoryMB: 768}
}

// Image is the local Debian benchmark image: its oci-layout reference, its
// unpacked root (in a store shared by the tests) and its digest.
func Image(t testing.TB, repoRoot string) (ref, root, digest string) {
	t.Helper()
	ref = benchimage.Ref(t, repoRoot)
	store, err := image.Open(filepath.Join(CacheDir(t), "images"), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	img, err := store.Resolve(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return ref, img.Root, img.Digest
}

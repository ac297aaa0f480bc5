package qemu

import (
	"sync"
	"testing"

	"evals.si/internal/testenv/vmtest"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
	"evals.si/sandbox/vm"
)

// The sandbox suites on the qemu rung: real VMs of the local Debian image
// under QEMU (software emulation here), through the rung every spec gets.

// suiteRung is one rung for every subtest, as a process has one: its
// probe boots a VM, which is seconds under software emulation.
var suiteRung struct {
	sync.Mutex
	r *vm.Rung
}

func newRung(t *testing.T) sandbox.Rung {
	t.Helper()
	suiteRung.Lock()
	defer suiteRung.Unlock()
	if suiteRung.r == nil {
		suiteRung.r = vm.New(vm.Options{VMM: New(Options{}), Settings: vmtest.Settings(t, "../.."), CacheDir: vmtest.CacheDir(t)})
	}
	if p := suiteRung.r.Probe(t.Context()); !p.Works {
		t.Fatalf("the qemu rung does not work here: %s", p.Reason)
	}
	return suiteRung.r
}

func suiteOptions(t *testing.T) sandboxtest.Options {
	ref, root, digest := vmtest.Image(t, "../..")
	o := sandboxtest.Options{Gaps: map[string]string{}, Uncontained: map[string]string{}, NotRun: map[string]string{}}
	// A VM boots an image: the suites' no-image config gets the local
	// Debian image (its sh, coreutils and python3).
	o.Config = func(c *sandbox.Config) {
		if c.Root == "" {
			c.Root, c.Image, c.ImageDigest = root, ref, digest
		}
	}
	o.Users = func(t *testing.T, c *sandbox.Config) { c.Root, c.Image, c.ImageDigest = root, ref, digest }
	return o
}

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, suiteOptions(t)) }

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, suiteOptions(t)) }

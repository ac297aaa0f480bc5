package landlock

import (
	"testing"

	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/sandboxtest"
)

func suiteOptions() sandboxtest.Options {
	o := sandboxtest.Options{
		Gaps:        map[string]string{},
		Uncontained: map[string]string{},
		NotRun:      map[string]string{},
	}
	// Commands and file operations each run in a launcher, one at a time
	// (execMu: they mount the same overlay upper directory).
	o.Gaps[sandboxtest.CapFilesDuringExec] = "file operations wait for the running command: every launcher mounts the sandbox's one overlay upper directory, so they run one at a time"
	// Users are added to an image's /etc as a Dockerfile's useradd would;
	// without an image /etc is the host's, read-only.
	o.Users = func(t *testing.T, c *sandbox.Config) { c.Root = debianRoot(t) }
	// Without a cgroup nothing caps the number of processes.
	if cgs, note, err := limits.Detect("auto", limits.ThisHost()); err != nil || cgs == nil {
		o.NotRun[sandboxtest.RowForkBomb] = "no usable cgroup on this host, so no process cap (" + note + ")"
	}
	return o
}

func newRung(t *testing.T) sandbox.Rung {
	requireLandlock(t)
	return New()
}

func TestConformance(t *testing.T) { sandboxtest.Conformance(t, newRung, suiteOptions()) }

// TestConformanceWithoutCgroup runs the suite on the rlimit-only path that
// hosts without a usable cgroup take.
func TestConformanceWithoutCgroup(t *testing.T) {
	o := suiteOptions()
	o.Config = func(c *sandbox.Config) { c.Limits.Cgroup = "off" }
	sandboxtest.Conformance(t, newRung, o)
}

func TestEscapes(t *testing.T) { sandboxtest.Escapes(t, newRung, suiteOptions()) }

// debianRoot unpacks the local Debian image (scripts/build-local-image.sh).
func debianRoot(t *testing.T) string { return benchimage.Root(t, "../..") }

package bwrap

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"

	"evals.si/sandbox/reexec"
)

// HelperName is the small helper binary (cmd/evalsi-sandbox) the rung
// prefers over re-executing the engine: one starts per sandbox, and a small
// Go binary starts several times faster than the whole engine.
const HelperName = "evalsi-sandbox"

// DefaultHelper is the binary the rung runs as its launcher, exec server and
// forwarder when Options.Helper is empty: HelperName next to the running
// executable when it comes from the same build (same VCS revision, neither
// built from a modified tree), else the running executable itself. A helper
// from another build could speak another version of the exec protocol, so
// it is never used.
func DefaultHelper() (string, error) {
	self, err := reexec.Self()
	if err != nil {
		return "", err
	}
	cand := filepath.Join(filepath.Dir(self), HelperName)
	if cand == self {
		return self, nil
	}
	if st, err := os.Stat(cand); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return self, nil
	}
	own, ok := debug.ReadBuildInfo()
	if !ok {
		return self, nil
	}
	other, err := buildinfo.ReadFile(cand)
	if err != nil || !sameBuild(own, other) {
		return self, nil
	}
	return cand, nil
}

// sameBuild reports whether two binaries come from one clean checkout at
// one revision of one module, built by one Go version.
func sameBuild(a, b *debug.BuildInfo) bool {
	if a.Main.Path != b.Main.Path || a.GoVersion != b.GoVersion {
		return false
	}
	rev, mod := vcs(a)
	rev2, mod2 := vcs(b)
	return rev != "" && rev == rev2 && mod == "false" && mod2 == "false"
}

func vcs(bi *debug.BuildInfo) (revision, modified string) {
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	return revision, modified
}

package vmprobe

import (
	"errors"
	"strings"
	"testing"

	"evals.si/sandbox"
)

func TestVMRungsAreVocabularyOnly(t *testing.T) {
	for _, r := range []*Rung{Firecracker(), SmolVM()} {
		p := r.Probe(t.Context())
		if p.Works || p.Isolation != sandbox.LevelVM || p.Rung != r.Name() {
			t.Errorf("%s probe = %+v; want works=false at level vm", r.Name(), p)
		}
		for _, want := range []string{"not implemented", "/dev/kvm"} {
			if !strings.Contains(p.Reason, want) {
				t.Errorf("%s probe reason %q lacks %q", r.Name(), p.Reason, want)
			}
		}
		if _, err := r.Create(t.Context(), sandbox.Config{}); !errors.Is(err, ErrNotImplemented) {
			t.Errorf("%s Create err = %v", r.Name(), err)
		}
		t.Logf("%s: %s", r.Name(), p.Reason)
	}
}

package remote_test

import (
	"strings"
	"testing"

	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
)

// A pool started without --allow-host-root refuses a sandbox that names no
// image: the client's task would otherwise read the pool machine's own
// root. The refusal says what to do.
func TestPoolRefusesImagelessWithoutAllowHostRoot(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{NoHostRoot: true})
	p := run.Dial(t, "imageless")
	sb, err := p.Rung().Create(t.Context(), sandbox.Config{Workdir: "/workspace"})
	if err == nil {
		sb.Close(t.Context())
		t.Fatal("a sandbox without an image was made on the pool's own root")
	}
	for _, want := range []string{"names no image", "environment.image", "--allow-host-root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
}

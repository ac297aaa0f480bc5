package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateDir(t *testing.T) {
	p, owned, err := StateDir("", "bwrap")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(p)
	if !owned || !strings.HasPrefix(filepath.Base(p), "evalsi-bwrap-") {
		t.Errorf("StateDir(\"\") = %q, owned %v; want an owned evalsi-bwrap-* temp dir", p, owned)
	}
	given := filepath.Join(t.TempDir(), "a", "b")
	p, owned, err = StateDir(given, "host")
	if err != nil {
		t.Fatal(err)
	}
	if owned || p != given {
		t.Errorf("StateDir(%q) = %q, owned %v; want the given dir, not owned", given, p, owned)
	}
	if st, err := os.Stat(given); err != nil || !st.IsDir() {
		t.Errorf("the given state dir was not created: %v", err)
	}
}

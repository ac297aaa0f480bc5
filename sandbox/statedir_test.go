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
	if !owned || p != given {
		t.Errorf("StateDir(%q) = %q, owned %v; want the given dir, owned (it did not exist)", given, p, owned)
	}
	if st, err := os.Stat(given); err != nil || !st.IsDir() {
		t.Errorf("the given state dir was not created: %v", err)
	}
	// A dir that already exists stays the caller's.
	p, owned, err = StateDir(given, "host")
	if err != nil || owned || p != given {
		t.Errorf("StateDir(existing %q) = %q, owned %v, %v; want the given dir, not owned", given, p, owned, err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := StateDir(file, "host"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("StateDir(a file) = %v; want an error saying it is not a directory", err)
	}
}

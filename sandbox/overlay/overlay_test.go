package overlay

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readOr(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// TestMountSnapshotStack mounts base+layer, changes files, snapshots, and
// stacks the snapshot over the base again: changes and deletions survive,
// the base and the layer are never written.
func TestMountSnapshotStack(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "overlayfs mounts need root; the copy fallback is tested in TestCopyLayer")
	}
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	write(t, filepath.Join(base, "etc/conf"), "base")
	write(t, filepath.Join(base, "etc/drop"), "drop me")
	state := filepath.Join(dir, "s1")
	os.Mkdir(state, 0o755)
	r, err := Mount([]string{base}, state)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != ModeOverlay {
		t.Fatalf("mode %s (%s)", r.Mode(), r.Note())
	}
	write(t, filepath.Join(r.Merged, "etc/conf"), "changed")
	write(t, filepath.Join(r.Merged, "new/file"), "new")
	if err := os.Remove(filepath.Join(r.Merged, "etc/drop")); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(dir, "layer")
	if err := r.Snapshot(layer); err != nil {
		t.Fatal(err)
	}
	if readOr(filepath.Join(base, "etc/conf")) != "base" || readOr(filepath.Join(base, "etc/drop")) != "drop me" {
		t.Errorf("the base layer was modified")
	}
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}

	state2 := filepath.Join(dir, "s2")
	os.Mkdir(state2, 0o755)
	r2, err := Mount([]string{layer, base}, state2)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Remove()
	if got := readOr(filepath.Join(r2.Merged, "etc/conf")); got != "changed" {
		t.Errorf("restored etc/conf = %q", got)
	}
	if _, err := os.Stat(filepath.Join(r2.Merged, "etc/drop")); !os.IsNotExist(err) {
		t.Errorf("a deleted file came back: %v", err)
	}
	write(t, filepath.Join(r2.Merged, "new/file"), "again")
	if readOr(filepath.Join(layer, "new/file")) != "new" {
		t.Errorf("writing in a restored root modified the layer")
	}
	if err := r2.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := r2.Unmount(); err != nil {
		t.Errorf("Unmount is not idempotent: %v", err)
	}
}

// TestCopyLayer applies layers by copying, with overlayfs whiteout and
// opaque-directory semantics (the fallback when overlayfs cannot be used).
func TestCopyLayer(t *testing.T) {
	dir := t.TempDir()
	base, top, dst := filepath.Join(dir, "base"), filepath.Join(dir, "top"), filepath.Join(dir, "dst")
	write(t, filepath.Join(base, "keep"), "base")
	write(t, filepath.Join(base, "gone"), "x")
	write(t, filepath.Join(base, "opaque/old"), "old")
	write(t, filepath.Join(top, "keep"), "top")
	write(t, filepath.Join(top, "opaque/new"), "new")
	os.Symlink("keep", filepath.Join(top, "link"))
	root := os.Geteuid() == 0
	if root {
		if err := unix.Mknod(filepath.Join(top, "gone"), unix.S_IFCHR|0o000, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(filepath.Join(top, "opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(dst, 0o755)
	for _, l := range []string{base, top} {
		if err := CopyLayer(l, dst); err != nil {
			t.Fatal(err)
		}
	}
	if got := readOr(filepath.Join(dst, "keep")); got != "top" {
		t.Errorf("keep = %q", got)
	}
	if got, _ := os.Readlink(filepath.Join(dst, "link")); got != "keep" {
		t.Errorf("symlink = %q", got)
	}
	if got := readOr(filepath.Join(dst, "opaque/new")); got != "new" {
		t.Errorf("opaque/new = %q", got)
	}
	if !root {
		testenv.Missing(t, "root", "whiteouts and trusted xattrs need root")
	}
	if _, err := os.Lstat(filepath.Join(dst, "gone")); !os.IsNotExist(err) {
		t.Errorf("a whiteout did not delete the file below: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "opaque/old")); !os.IsNotExist(err) {
		t.Errorf("an opaque directory merged with the one below: %v", err)
	}
}

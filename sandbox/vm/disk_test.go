package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

// needTools reports e2fsprogs and qemu-img missing.
func needTools(t *testing.T) {
	t.Helper()
	for tool, pkg := range map[string]string{"mkfs.ext4": "e2fsprogs", "debugfs": "e2fsprogs", "dumpe2fs": "e2fsprogs", "qemu-img": "qemu-utils"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, "install "+pkg)
		}
	}
}

// debugfsCat returns a file of an ext4 image, read by e2fsprogs's debugfs
// without mounting; "" when it is absent.
func debugfsCat(t *testing.T, img, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s on %s: %v", path, img, err)
	}
	return string(out)
}

// mountRO mounts an ext4 image read-only on a loop device, for the checks
// that compare its tree with the source's.
func mountRO(t *testing.T, img string) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop,ro", "-t", "ext4", img, mnt).CombinedOutput(); err != nil {
		testenv.Missing(t, "loop mounts", "mount -o loop,ro: "+strings.TrimSpace(string(out))+" (the test runs as root with loop devices)")
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// testTree makes a root tree with what an image's root has and a careless
// copy loses: a setuid binary, a file and a directory owned by uid 1000, a
// symlink, a hard link, a device node, a fifo, a sticky directory and an
// extended attribute.
func testTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the test tree has files of other owners and a device node")
	}
	root := filepath.Join(t.TempDir(), "root")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin", "home/user", "dev", "tmp", "etc"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(root, "bin/su"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(root, "bin/su"), 0o4755|os.ModeSetuid))
	must(unix.Chmod(filepath.Join(root, "bin/su"), 0o4755))
	must(os.WriteFile(filepath.Join(root, "home/user/notes"), bytes.Repeat([]byte("n"), 10000), 0o600))
	must(os.Chown(filepath.Join(root, "home/user/notes"), 1000, 1000))
	must(os.Chmod(filepath.Join(root, "home/user"), 0o700))
	must(os.Chown(filepath.Join(root, "home/user"), 1000, 1000))
	must(os.Symlink("su", filepath.Join(root, "bin/sudo")))
	must(os.Symlink(strings.Repeat("long/", 20)+"target", filepath.Join(root, "bin/long")))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	must(os.Link(filepath.Join(root, "etc/passwd"), filepath.Join(root, "etc/passwd.link")))
	must(unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mkfifo(filepath.Join(root, "tmp/fifo"), 0o644))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))
	if err := unix.Lsetxattr(filepath.Join(root, "etc/passwd"), "user.evalsi", []byte("kept"), 0); err != nil {
		t.Logf("no user xattrs on %s: %v", root, err)
	}
	return root
}

func TestRootDiskContent(t *testing.T) {
	needTools(t)
	root := testTree(t)
	ctx := context.Background()
	img, err := RootDisk(ctx, t.TempDir(), "sha256:0123abcd", root, 32)
	if err != nil {
		t.Fatal(err)
	}
	if base := filepath.Base(img); base != "rootfs-sha256-0123abcd.ext4" {
		t.Errorf("image name %s", base)
	}
	mnt := mountRO(t, img)
	// Every entry of the source has its twin in the image: type, mode,
	// owner, size, device number, link target, content.
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		gi, err := os.Lstat(filepath.Join(mnt, rel))
		if err != nil {
			t.Errorf("%s: not in the image: %v", rel, err)
			return nil
		}
		s, g := fi.Sys().(*syscall.Stat_t), gi.Sys().(*syscall.Stat_t)
		if rel == "." {
			// root_owner=0:0 makes / root's, whoever owns the tree.
			if g.Uid != 0 || g.Gid != 0 || gi.Mode() != fi.Mode() {
				t.Errorf("/: %v %d:%d, want %v 0:0", gi.Mode(), g.Uid, g.Gid, fi.Mode())
			}
			return nil
		}
		if s.Mode != g.Mode || s.Uid != g.Uid || s.Gid != g.Gid || s.Rdev != g.Rdev {
			t.Errorf("%s: mode %o owner %d:%d rdev %d in the image, %o %d:%d %d in the tree", rel, g.Mode, g.Uid, g.Gid, g.Rdev, s.Mode, s.Uid, s.Gid, s.Rdev)
		}
		switch {
		case fi.Mode().IsRegular():
			a, _ := os.ReadFile(p)
			b, _ := os.ReadFile(filepath.Join(mnt, rel))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: content differs", rel)
			}
		case fi.Mode()&os.ModeSymlink != 0:
			a, _ := os.Readlink(p)
			b, _ := os.Readlink(filepath.Join(mnt, rel))
			if a != b {
				t.Errorf("%s: links to %q in the image, %q in the tree", rel, b, a)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(filepath.Join(mnt, "etc/passwd"))
	b, _ := os.Stat(filepath.Join(mnt, "etc/passwd.link"))
	if !os.SameFile(a, b) {
		t.Errorf("etc/passwd.link is not a hard link of etc/passwd in the image")
	}
	want := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(root, "etc/passwd"), "user.evalsi", want); err == nil {
		got := make([]byte, 16)
		m, err := unix.Lgetxattr(filepath.Join(mnt, "etc/passwd"), "user.evalsi", got)
		if err != nil || string(got[:m]) != string(want[:n]) {
			t.Errorf("xattr user.evalsi: %q, %v; want %q", got[:max(m, 0)], err, want[:n])
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	if free := int64(sfs.Bavail) * sfs.Bsize; free < 32<<20 {
		t.Errorf("%d MiB free, want 32", free>>20)
	}
	if inodes := sfs.Ffree; inodes < 32<<20/16384 {
		t.Errorf("%d free inodes, too few for 32 MiB of small files", inodes)
	}
	// No journal (see RootDisk), 4 KiB blocks, and a sparse file.
	out, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v: %s", err, out)
	}
	if s := string(out); strings.Contains(s, "has_journal") || !strings.Contains(s, "Block size:               4096") || !strings.Contains(s, "evalsi-root") {
		t.Errorf("dumpe2fs -h:\n%s", s)
	}
	st, _ := os.Stat(img)
	if alloc := st.Sys().(*syscall.Stat_t).Blocks * 512; alloc >= st.Size()/2 {
		t.Errorf("the image allocates %d of its %d bytes: not sparse", alloc, st.Size())
	}
}

func TestRootDiskCache(t *testing.T) {
	needTools(t)
	root := testTree(t)
	ctx := context.Background()
	cache := t.TempDir()
	const n = 4
	var wg sync.WaitGroup
	imgs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { imgs[i], errs[i] = RootDisk(ctx, cache, "concurrent", root, 8) })
	}
	wg.Wait()
	first, err := os.Stat(imgs[0])
	if errs[0] != nil || err != nil {
		t.Fatal(errs[0], err)
	}
	for i := range n {
		st, err := os.Stat(imgs[i])
		if errs[i] != nil || err != nil || !os.SameFile(st, first) {
			t.Errorf("caller %d: %s, %v, %v: want the one image all callers share", i, imgs[i], errs[i], err)
		}
	}
	// The tree changes, the key does not: the cache is by key.
	os.WriteFile(filepath.Join(root, "new"), []byte("x"), 0o644)
	again, err := RootDisk(ctx, cache, "concurrent", root, 8)
	if st, _ := os.Stat(again); err != nil || !os.SameFile(st, first) {
		t.Errorf("a second call rebuilt the image: %s, %v", again, err)
	}
	ents, _ := os.ReadDir(cache)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "rootfs-concurrent.ext4 rootfs-concurrent.lock" {
		t.Errorf("cache holds %v, want the image and its lock file", names)
	}
}

func TestRootDiskErrors(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	t.Run("a failed build leaves nothing", func(t *testing.T) {
		cache := t.TempDir()
		_, err := RootDisk(ctx, cache, "k", filepath.Join(t.TempDir(), "no-such-root"), 8)
		if err == nil || !strings.Contains(err.Error(), "no-such-root") {
			t.Fatalf("err = %v, want one naming the root", err)
		}
		ents, _ := os.ReadDir(cache)
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".lock") {
				t.Errorf("%s left in the cache", e.Name())
			}
		}
	})
	t.Run("a key that could leave the cache", func(t *testing.T) {
		_, err := RootDisk(ctx, t.TempDir(), "../x", t.TempDir(), 8)
		if err == nil || !strings.Contains(err.Error(), "cache key") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("mkfs.ext4 missing says what to install", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := RootDisk(ctx, t.TempDir(), "k", t.TempDir(), 8)
		if err == nil || !strings.Contains(err.Error(), "install e2fsprogs") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("waiting for another builder ends with ctx", func(t *testing.T) {
		cache := t.TempDir()
		unlock, err := lockFile(ctx, filepath.Join(cache, "rootfs-held.lock"))
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = RootDisk(short, cache, "held", t.TempDir(), 8)
		if err == nil || !strings.Contains(err.Error(), "waiting for another build") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestOverlay(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	f, _ := os.Create(base)
	f.Truncate(8 << 20)
	f.WriteAt([]byte("base data"), 4096)
	f.Close()
	// A relative base: the overlay must record it absolute.
	t.Chdir(dir)
	dst := filepath.Join(t.TempDir(), "vda.qcow2")
	if err := Overlay(ctx, "base.raw", "raw", dst); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("qemu-img", "info", "--output=json", dst).Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Format        string `json:"format"`
		VirtualSize   int64  `json:"virtual-size"`
		BackingFile   string `json:"backing-filename"`
		BackingFormat string `json:"backing-filename-format"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if info.Format != "qcow2" || info.BackingFile != base || info.BackingFormat != "raw" || info.VirtualSize != 8<<20 {
		t.Errorf("qemu-img info: %+v, want a qcow2 of 8 MiB backed by raw %s", info, base)
	}
	if out, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "qcow2", base, dst).CombinedOutput(); err != nil {
		t.Errorf("the overlay reads differently from its base: %v: %s", err, out)
	}
	tests := []struct{ name, base, format, want string }{
		{"unknown format", base, "vmdk", "neither raw nor qcow2"},
		{"missing base", filepath.Join(dir, "none"), "raw", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Overlay(ctx, tt.base, tt.format, filepath.Join(t.TempDir(), "o.qcow2"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCloneRaw(t *testing.T) {
	needTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		name   string
		size   int64
		writes map[int64]string
	}{
		{"empty", 0, nil},
		{"all hole", 64 << 20, nil},
		{"data at the edges and inside", 64 << 20, map[int64]string{0: "start", 1<<20 + 3: "unaligned", 10 << 20: strings.Repeat("x", 3<<20), 64<<20 - 4: "end!"}},
		{"a size that is no multiple of a block", 5<<20 + 17, map[int64]string{5 << 20: "tail of 17 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".raw")
			f, err := os.Create(src)
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(tt.size)
			for off, s := range tt.writes {
				f.WriteAt([]byte(s), off)
			}
			f.Close()
			dst := src + ".clone"
			if err := CloneRaw(ctx, src, dst); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(src)
			b, _ := os.ReadFile(dst)
			if !bytes.Equal(a, b) {
				t.Fatalf("the clone differs from %s", src)
			}
			ss, _ := os.Stat(src)
			ds, _ := os.Stat(dst)
			if sa, da := ss.Sys().(*syscall.Stat_t).Blocks, ds.Sys().(*syscall.Stat_t).Blocks; da > sa+8 {
				t.Errorf("the clone allocates %d blocks, its source %d: holes were filled", da, sa)
			}
		})
	}
	t.Run("an ext4 root disk", func(t *testing.T) {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "hello"), []byte("cloned"), 0o644)
		img, err := RootDisk(ctx, t.TempDir(), "clone", root, 8)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "vda.raw")
		if err := CloneRaw(ctx, img, dst); err != nil {
			t.Fatal(err)
		}
		if got := debugfsCat(t, dst, "/hello"); got != "cloned" {
			t.Fatalf("the clone's /hello is %q", got)
		}
	})
	t.Run("a missing source creates nothing", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "vda.raw")
		err := CloneRaw(ctx, filepath.Join(dir, "none"), dst)
		if err == nil || !strings.Contains(err.Error(), "none") {
			t.Fatalf("err = %v", err)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Fatalf("%s exists", dst)
		}
	})
}

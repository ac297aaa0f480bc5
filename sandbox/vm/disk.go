package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Sizes of the root disks' ext4: 4 KiB blocks and 256-byte inodes, set
// rather than left to mke2fs.conf, whose "small" type would give images
// under 512 MiB 1 KiB blocks.
const (
	ext4Block = 4096
	ext4Inode = 256
)

// diskKeyPattern is what a cache key may hold: an image digest (sha256:…) or a
// hash, nothing that could leave the cache directory.
var diskKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$`)

// RootDisk returns a raw ext4 image of the tree rootDir with freeMB MiB
// free, cached under cacheDir by key (an image digest, or a hash of a host
// root's path), building it on first use. Owners, modes (setuid included),
// symlinks, hard links, device nodes and extended attributes are those of
// the tree, as mkfs.ext4 -d copies them. The file is sparse: its size
// counts the free space, its blocks only the data.
//
// Concurrent callers, in this process or others, build it once: they take
// a lock on cacheDir/rootfs-KEY.lock, and the image appears by rename, so
// it is whole when it exists. A failed build leaves no image.
//
// The filesystem has no journal. Each machine writes to its own overlay
// or copy of the image, which is thrown away with the machine (a crash
// included), and a snapshot saves the disk and the guest's page cache
// together, so a journal would protect nothing; it would cost every
// metadata write a second one, through an emulated disk under TCG, and
// megabytes of the image.
func RootDisk(ctx context.Context, cacheDir, key, rootDir string, freeMB int) (string, error) {
	if !diskKeyPattern.MatchString(key) {
		return "", fmt.Errorf("root disk of %s: the cache key %q has characters other than letters, digits and ._:- (pass the image digest or a hash)", rootDir, key)
	}
	if freeMB < 0 {
		return "", fmt.Errorf("root disk of %s: free space %d MiB is negative", rootDir, freeMB)
	}
	name := "rootfs-" + strings.ReplaceAll(key, ":", "-")
	img := filepath.Join(cacheDir, name+".ext4")
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return "", fmt.Errorf("root disk of %s: mkfs.ext4 not found: install e2fsprogs (1.43 or later, for mkfs.ext4 -d)", rootDir)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("root disk cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, name+".lock"))
	if err != nil {
		return "", fmt.Errorf("root disk of %s: %w", rootDir, err)
	}
	defer unlock()
	// Another caller may have built it while this one waited.
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	usage, err := treeUsage(ctx, rootDir)
	if err != nil {
		return "", fmt.Errorf("root disk of %s: %w", rootDir, err)
	}
	size, inodes := ext4Size(usage, freeMB)
	tmp, err := os.CreateTemp(cacheDir, "."+name+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("root disk cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	err = tmp.Truncate(size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("root disk of %s: %w", rootDir, err)
	}
	// -E root_owner: / is root's whatever owns rootDir on the host.
	// lazy_itable_init=0: mke2fs marks the inode tables zeroed now
	// (discarding the sparse file's blocks costs nothing), rather than
	// each guest's ext4lazyinit thread writing them after mount. -m 0:
	// the sandbox runs as root, so reserved blocks would only waste 5%.
	args := []string{"-q", "-F", "-t", "ext4", "-b", strconv.Itoa(ext4Block), "-I", strconv.Itoa(ext4Inode),
		"-N", strconv.FormatInt(inodes, 10), "-m", "0", "-O", "^has_journal",
		"-E", "root_owner=0:0,lazy_itable_init=0", "-L", "evalsi-root", "-d", rootDir, tmp.Name()}
	cmd := exec.CommandContext(ctx, mkfs, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("root disk of %s: mkfs.ext4 %s: %w: %s", rootDir, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	if err := syncFile(tmp.Name()); err != nil {
		return "", fmt.Errorf("root disk of %s: %w", rootDir, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", fmt.Errorf("root disk cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), img); err != nil {
		return "", fmt.Errorf("root disk cache: %w", err)
	}
	return img, nil
}

// usage is what a tree needs on ext4.
type usage struct {
	// blocks counts 4 KiB data blocks: each file's and directory's size
	// rounded up, and symlinks whose target does not fit the inode.
	blocks int64
	inodes int64
}

// treeUsage walks rootDir without following symlinks. Hard links are
// counted once, as mkfs.ext4 -d stores them.
func treeUsage(ctx context.Context, rootDir string) (usage, error) {
	var u usage
	type ino struct{ dev, ino uint64 }
	seen := map[ino]bool{}
	err := filepath.WalkDir(rootDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := ino{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		u.inodes++
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			u.blocks += (st.Size + ext4Block - 1) / ext4Block
		case unix.S_IFDIR:
			// A directory's size on the host filesystem is a guess of
			// its size on ext4 (tmpfs and overlayfs report less): one
			// block at least.
			u.blocks += max(1, (st.Size+ext4Block-1)/ext4Block)
		case unix.S_IFLNK:
			// ext4 keeps targets under 60 bytes in the inode.
			if st.Size >= 60 {
				u.blocks++
			}
		}
		return nil
	})
	if err != nil {
		return usage{}, fmt.Errorf("measuring the tree: %w", err)
	}
	return u, nil
}

// ext4Size returns the image size in bytes and the inode count for a tree
// of usage u with freeMB MiB free. The data gets an eighth more for the
// extent trees and directory growth mkfs -d does not predict, the inode
// tables their own space, and 16 MiB covers the superblock copies, group
// descriptors, bitmaps and the resize inode's reserve. Inodes: the tree's
// plus a quarter, plus one per 16 KiB of free space (mke2fs's default
// ratio), so the free space can be used by files and not only bytes.
func ext4Size(u usage, freeMB int) (size, inodes int64) {
	inodes = u.inodes + u.inodes/4 + int64(freeMB)*(1<<20)/16384 + 1024
	data := u.blocks*ext4Block + u.blocks*ext4Block/8
	size = data + inodes*ext4Inode + 16<<20 + int64(freeMB)<<20
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	return size, inodes
}

// lockFile takes an exclusive flock on name, polling so that ctx can end
// the wait (flock itself cannot be interrupted).
func lockFile(ctx context.Context, name string) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another build holding %s: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func syncFile(name string) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// tail returns the last n bytes of s: a failed command's last words are
// the ones that say why.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Overlay creates dst, a qcow2 file whose reads fall through to base (of
// format baseFormat, "raw" or "qcow2") and whose writes stay in dst: a
// machine's own disk on a shared, cached image, in constant time. base
// must not change while dst exists.
func Overlay(ctx context.Context, base, baseFormat, dst string) error {
	if baseFormat != "raw" && baseFormat != "qcow2" {
		return fmt.Errorf("overlay %s: base format %q is neither raw nor qcow2", dst, baseFormat)
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return fmt.Errorf("overlay %s: %w", dst, err)
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("overlay %s: its base: %w", dst, err)
	}
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		return fmt.Errorf("overlay %s: qemu-img not found: install qemu-utils", dst)
	}
	// -u with the size given: qemu-img does not open base's backing
	// chain, whose qcow2 headers a VMM wrote (a compromised one could have
	// named any file, or a network block device, for the engine to open).
	size, err := virtualSize(abs, baseFormat)
	if err != nil {
		return fmt.Errorf("overlay %s: %w", dst, err)
	}
	// The backing path is absolute: qemu resolves a relative one against
	// dst's directory, which is the machine's, not the cache's.
	args := []string{"create", "-q", "-f", "qcow2", "-u", "-F", baseFormat, "-b", abs, dst, strconv.FormatUint(size, 10)}
	cmd := exec.CommandContext(ctx, qemuImg, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.Remove(dst)
		return fmt.Errorf("overlay %s: qemu-img %s: %w: %s", dst, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return nil
}

// Rebase points the qcow2 file path's backing at base (of baseFormat),
// whatever its header said: after a VMM wrote path (a machine's disk that
// becomes a layer others start from), its header is the VMM's word, and
// only the engine's own is kept. Only the header changes (-u): no file the
// old header names is opened.
func Rebase(ctx context.Context, path, base, baseFormat string) error {
	abs, err := filepath.Abs(base)
	if err != nil {
		return fmt.Errorf("rebase %s: %w", path, err)
	}
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		return fmt.Errorf("rebase %s: qemu-img not found: install qemu-utils", path)
	}
	args := []string{"rebase", "-q", "-u", "-f", "qcow2", "-F", baseFormat, "-b", abs, path}
	cmd := exec.CommandContext(ctx, qemuImg, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rebase %s: qemu-img %s: %w: %s", path, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return nil
}

// virtualSize is the size a disk shows its machine: a raw file's length,
// or a qcow2 header's size field.
func virtualSize(path, format string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if format == "raw" {
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return uint64(st.Size()), nil
	}
	var h [32]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0, fmt.Errorf("reading %s's qcow2 header: %w", path, err)
	}
	if string(h[:4]) != "QFI\xfb" {
		return 0, fmt.Errorf("%s is not a qcow2 file", path)
	}
	return binary.BigEndian.Uint64(h[24:32]), nil
}

// CloneRaw copies the raw disk src to dst (created, or truncated), for a
// VMM that cannot read qcow2 (Firecracker): a reflink (FICLONE) where the
// filesystem shares blocks (btrfs, XFS), which takes constant time, else a
// copy of only src's data extents, leaving its holes holes. A failed copy
// leaves no dst.
func CloneRaw(ctx context.Context, src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("clone disk: %s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("clone disk: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("clone disk %s: %w", dst, cerr)
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	// EOPNOTSUPP, EXDEV (another filesystem) or EINVAL: no reflink here.
	if err := sparseCopy(ctx, in, out, st.Size()); err != nil {
		return fmt.Errorf("clone disk %s to %s: %w", src, dst, err)
	}
	return nil
}

// sparseCopy copies the data extents of in (SEEK_DATA to SEEK_HOLE) to the
// same offsets of out and sets out's size, so holes stay unallocated.
func sparseCopy(ctx context.Context, in, out *os.File, size int64) error {
	if err := out.Truncate(size); err != nil {
		return err
	}
	ifd := int(in.Fd())
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data after off: the rest is a hole
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		if err := copyRange(in, out, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyRange copies n bytes at off, with copy_file_range where the kernel
// has it for these files, else through a buffer.
func copyRange(in, out *os.File, off, n int64) error {
	for n > 0 {
		roff, woff := off, off
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				_, err := io.Copy(io.NewOffsetWriter(out, off), io.NewSectionReader(in, off, n))
				return err
			}
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if c == 0 {
			return fmt.Errorf("copy_file_range: %s ended at %d, before its size", in.Name(), off)
		}
		off += int64(c)
		n -= int64(c)
	}
	return nil
}

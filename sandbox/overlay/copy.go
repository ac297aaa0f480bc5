package overlay

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// CopyLayer copies the layer directory src over dst with overlayfs
// semantics: a whiteout (a 0:0 character device) deletes the path below it,
// an opaque directory (trusted.overlay.opaque=y) replaces the directory
// below instead of merging with it. Ownership is kept when running as root.
func CopyLayer(src, dst string) error { return copyLayer(src, dst, nil) }

// copyLayer is CopyLayer with ownership passed through hostID (as root),
// which maps an id as the layer stores it to the id the copy gets.
func copyLayer(src, dst string, hostID func(id int, gid bool) int) error {
	root := os.Geteuid() == 0
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		switch mode := info.Mode(); {
		case mode&fs.ModeCharDevice != 0 && st != nil && st.Rdev == 0:
			return os.RemoveAll(target)
		case mode.IsDir():
			if rel != "." && isOpaque(path) {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
			}
			if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
				if err := os.Remove(target); err != nil {
					return err
				}
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(target, mode.Perm()|mode&(fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid)); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			os.RemoveAll(target)
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case mode.IsRegular():
			os.RemoveAll(target)
			if err := copyFile(path, target, mode); err != nil {
				return err
			}
		default:
			// Devices, fifos and sockets in a layer are not reproduced.
			return nil
		}
		if root && st != nil {
			uid, gid := int(st.Uid), int(st.Gid)
			if hostID != nil {
				uid, gid = hostID(uid, false), hostID(gid, true)
			}
			if err := os.Lchown(target, uid, gid); err != nil {
				return fmt.Errorf("copying layer: %w", err)
			}
		}
		return nil
	})
}

func isOpaque(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}

// copyTree copies the layer directory src to dst (which must not exist)
// as it is: whiteouts, opaque directories and every other extended
// attribute, ownership, modes, times and hard links are kept, so the copy
// stacks as the original would. It is how a snapshot leaves a filesystem of
// its own (disk_mb), where a rename cannot reach.
func copyTree(src, dst string) error {
	type dirTimes struct {
		path string
		st   *unix.Stat_t
	}
	var dirs []dirTimes
	links := map[[2]uint64]string{} // (dev, ino) of multiply linked files → copy
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		perm := uint32(st.Mode) &^ unix.S_IFMT
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirTimes{target, &st})
		case unix.S_IFREG:
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				return os.Link(first, target)
			}
			if st.Nlink > 1 {
				links[key] = target
			}
			if err := copyFile(path, target, 0o600); err != nil {
				return err
			}
		case unix.S_IFLNK:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
			// Whiteouts are 0:0 character devices.
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		default:
			return nil // sockets are not reproduced
		}
		if err := copyXattrs(path, target); err != nil {
			return err
		}
		if err := unix.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Chmod(target, perm); err != nil {
				return err
			}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.UtimesNanoAt(unix.AT_FDCWD, target, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copying layer %s to %s: %w", src, dst, err)
	}
	// Directory modes and times last, deepest first: filling a directory
	// changes its times, and a read-only one could not be filled.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := unix.Chmod(d.path, uint32(d.st.Mode)&^unix.S_IFMT); err != nil {
			return fmt.Errorf("copying layer %s to %s: %w", src, dst, err)
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, d.path, []unix.Timespec{d.st.Atim, d.st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("copying layer %s to %s: %w", src, dst, err)
		}
	}
	return nil
}

// copyXattrs copies every extended attribute of src (not following a
// symlink) to dst: trusted.overlay.* marks opaque directories and
// redirects, security.capability file capabilities.
func copyXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(src, buf)
	if err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			return err
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(src, name, val); err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, val[:n], 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", name, dst, err)
		}
	}
	return nil
}

package overlay

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	// maxSymlinks bounds symlink resolution, like the kernel's ELOOP limit.
	maxSymlinks = 255
)

// unpacker applies layers, in order, onto one root directory. Every path is
// resolved inside root as if root were "/" (symlinks included), so no entry
// of any layer can create, change or remove anything outside root.
//
// It is not safe for concurrent use; nothing else writes to root while it
// runs, which is what makes resolving paths before using them race-free.
type unpacker struct {
	root   string
	logger *slog.Logger
	// chown is set when running as root: ownership from the tar is kept.
	chown bool
	// dirModes are applied at the end so read-only directories do not stop
	// later entries (or later layers) from being written into them.
	dirModes map[string]fs.FileMode
	// layerPaths holds what the current layer created, which an opaque
	// whiteout in the same layer must keep.
	layerPaths map[string]bool
	skipped    int
}

func newUnpacker(root string, logger *slog.Logger) *unpacker {
	return &unpacker{root: root, logger: logger, chown: os.Geteuid() == 0, dirModes: map[string]fs.FileMode{}}
}

// decompress returns the uncompressed tar stream of a layer blob, whatever
// its compression (gzip, zstd or none), detected from its magic bytes.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		return gzip.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		d, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// apply unpacks one uncompressed layer tar stream.
func (u *unpacker) apply(layer string, r io.Reader) error {
	u.layerPaths = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer %s: reading tar: %w", layer, err)
		}
		if err := u.entry(tr, hdr); err != nil {
			return fmt.Errorf("layer %s: entry %q: %w", layer, hdr.Name, err)
		}
	}
}

// finish applies the directory modes held back during unpacking.
func (u *unpacker) finish() error {
	dirs := make([]string, 0, len(u.dirModes))
	for d := range u.dirModes {
		dirs = append(dirs, d)
	}
	// Deepest first, so a read-only parent is locked last.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue // removed or replaced by a later layer
		}
		if err := os.Chmod(d, u.dirModes[d]); err != nil {
			return fmt.Errorf("setting mode of %s: %w", d, err)
		}
	}
	if u.skipped > 0 {
		u.logger.Info("image unpack skipped device nodes", "root", u.root, "count", u.skipped)
	}
	return nil
}

// cleanName turns a tar entry name into a clean path relative to the root,
// refusing names that climb out of it.
func cleanName(n string) (string, error) {
	n = strings.TrimLeft(n, "/")
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q escapes the image root", n)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// resolveDir resolves a root-relative directory path to a host path inside
// the root, following symlinks with root as "/"; components that do not exist
// yet are kept as they are.
func (u *unpacker) resolveDir(rel string) (string, error) {
	queue := splitPath(rel)
	cur := "" // clean, root-relative, symlink-free
	links := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = parentOf(cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(u.root, next))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("too many levels of symbolic links in %q", rel)
		}
		target, err := os.Readlink(filepath.Join(u.root, next))
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = ""
		}
		queue = append(splitPath(target), queue...)
	}
	return filepath.Join(u.root, cur), nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func parentOf(p string) string {
	d := path.Dir(p)
	if d == "." || d == "/" {
		return ""
	}
	return d
}

// target returns the host path for an entry: its parent resolved inside the
// root, its last component not followed (the entry replaces whatever is
// there).
func (u *unpacker) target(rel string) (dir, full string, err error) {
	dir, err = u.resolveDir(parentOf(rel))
	if err != nil {
		return "", "", err
	}
	return dir, filepath.Join(dir, path.Base(rel)), nil
}

func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil // the root itself
	}
	base := path.Base(rel)

	// Whiteouts remove what lower layers put there.
	if base == whiteoutOpaque {
		dir, err := u.resolveDir(parentOf(rel))
		if err != nil {
			return err
		}
		return u.opaque(dir)
	}
	if name, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if name == "" || name == "." || name == ".." {
			return fmt.Errorf("invalid whiteout name %q", base)
		}
		dir, err := u.resolveDir(parentOf(rel))
		if err != nil {
			return err
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("applying whiteout: %w", err)
		}
		return nil
	}

	dir, full, err := u.target(rel)
	if err != nil {
		return err
	}
	if full == u.root {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating parent directory: %w", err)
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)

	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := os.Lstat(full)
		if err != nil || !fi.IsDir() {
			if err := removeIfExists(full); err != nil {
				return err
			}
			if err := os.Mkdir(full, 0o755); err != nil {
				return err
			}
		}
		// Owner-writable until finish(), so later entries fit in.
		if err := os.Chmod(full, mode|0o700); err != nil {
			return err
		}
		u.dirModes[full] = mode
	case tar.TypeReg, tar.TypeRegA:
		if err := removeIfExists(full); err != nil {
			return err
		}
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing file: %w", err)
		}
	case tar.TypeSymlink:
		if err := removeIfExists(full); err != nil {
			return err
		}
		// The link's text is not followed here; resolveDir keeps any later
		// use of it inside the root.
		if err := os.Symlink(hdr.Linkname, full); err != nil {
			return err
		}
	case tar.TypeLink:
		lrel, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		if lrel == "" {
			return fmt.Errorf("hard link to the root directory")
		}
		_, lfull, err := u.target(lrel)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		fi, err := os.Lstat(lfull)
		if err != nil {
			return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		if fi.IsDir() {
			return fmt.Errorf("hard link target %q is a directory", hdr.Linkname)
		}
		if err := removeIfExists(full); err != nil {
			return err
		}
		if err := os.Link(lfull, full); err != nil {
			return err
		}
		u.layerPaths[full] = true
		return nil // shares the target's metadata
	case tar.TypeFifo:
		if err := removeIfExists(full); err != nil {
			return err
		}
		if err := syscall.Mkfifo(full, uint32(mode.Perm())); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock:
		// Device nodes are never created from an image: the sandbox
		// provides its own /dev.
		u.skipped++
		u.logger.Debug("image unpack: skipping device node", "path", rel)
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	default:
		u.logger.Debug("image unpack: skipping unsupported entry", "path", rel, "type", string(hdr.Typeflag))
		return nil
	}
	u.layerPaths[full] = true

	if u.chown {
		if err := os.Lchown(full, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("setting owner: %w", err)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeFifo:
		// After chown, which clears setuid/setgid bits.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
		if err := os.Chtimes(full, hdr.AccessTime, hdr.ModTime); err != nil {
			return err
		}
	}
	return nil
}

// opaque empties dir of everything lower layers put there.
func (u *unpacker) opaque(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("applying opaque whiteout: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if u.layerPaths[p] {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("applying opaque whiteout: %w", err)
		}
	}
	return nil
}

// removeIfExists removes p (a directory with its contents) unless absent.
func removeIfExists(p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("replacing %s: %w", p, err)
	}
	return nil
}

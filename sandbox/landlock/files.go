package landlock

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// systemDirs are the host directories bound read-only when there is no
// image root.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// locate maps a sandbox path to a directory on the host and the path
// relative to it. write says the caller wants to write.
func (s *Sandbox) locate(p string, write bool) (base, rel string, err error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.cfg.Workdir, p)
	}
	p = filepath.Clean(p)
	under := func(dir string) (string, bool) {
		if p == dir {
			return ".", true
		}
		if r, ok := strings.CutPrefix(p, dir+"/"); ok {
			return r, true
		}
		return "", false
	}
	if r, ok := under(s.cfg.Workdir); ok {
		return s.workDir(), r, nil
	}
	if r, ok := under("/tmp"); ok {
		return s.tmpDir(), r, nil
	}
	if !s.hasImage() {
		for _, d := range systemDirs {
			if r, ok := under(d); ok {
				if write {
					return "", "", fmt.Errorf("path %s is in the host's read-only system directory %s", p, d)
				}
				return d, r, nil
			}
		}
	}
	// Writes land in the overlay's upper directory; reads resolve below.
	return "", strings.TrimPrefix(p, "/"), nil
}

// ReadFile reads a file; relative paths are relative to the workdir.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	base, rel, err := s.locate(path, false)
	if err != nil {
		return nil, fmt.Errorf("reading %s from landlock sandbox: %w", path, err)
	}
	if base != "" {
		b, err := readIn(base, rel)
		if err != nil {
			return nil, fmt.Errorf("reading %s from landlock sandbox: %w", path, err)
		}
		return b, nil
	}
	// Image root: look through upper, the layers and the root, stopping at
	// the first entry; a whiteout (0/0 character device) hides lower ones.
	srcs := []string{s.upperDir()}
	for _, l := range s.cfg.Layers {
		srcs = append(srcs, l.Dir)
	}
	if s.hasImage() {
		srcs = append(srcs, s.cfg.Root)
	}
	for _, src := range srcs {
		r, err := os.OpenRoot(src)
		if err != nil {
			return nil, fmt.Errorf("reading %s from landlock sandbox: %w", path, err)
		}
		fi, err := r.Lstat(rel)
		if err != nil {
			r.Close()
			continue
		}
		if fi.Mode()&fs.ModeCharDevice != 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
				r.Close()
				break
			}
		}
		b, err := r.ReadFile(rel)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s from landlock sandbox: %w", path, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("reading %s from landlock sandbox: %w", path, fs.ErrNotExist)
}

func readIn(base, rel string) ([]byte, error) {
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadFile(rel)
}

// WriteFile writes a file, creating parent directories; relative paths are
// relative to the workdir. Absolute paths outside the workdir and /tmp go
// into the root's upper layer.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if err := s.usable(); err != nil {
		return err
	}
	base, rel, err := s.locate(path, true)
	if err != nil {
		return fmt.Errorf("writing %s into landlock sandbox: %w", path, err)
	}
	if base == "" {
		base = s.upperDir()
	}
	if rel == "." {
		return fmt.Errorf("writing %s into landlock sandbox: it is a directory", path)
	}
	if mode == 0 {
		mode = 0o644
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return fmt.Errorf("writing %s into landlock sandbox: %w", path, err)
	}
	defer r.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("writing %s into landlock sandbox: %w", path, err)
		}
	}
	if err := r.WriteFile(rel, data, mode.Perm()); err != nil {
		return fmt.Errorf("writing %s into landlock sandbox: %w", path, err)
	}
	// WriteFile keeps an existing file's mode and applies the umask.
	if err := r.Chmod(rel, mode.Perm()); err != nil {
		return fmt.Errorf("writing %s into landlock sandbox: %w", path, err)
	}
	return nil
}

// copyTree copies src's contents into dst (which exists), keeping modes and
// symlinks and overwriting files. Special files are skipped.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Chmod(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			os.Remove(target)
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(src, dst string, mode fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := os.Lstat(dst); err == nil && !fi.Mode().IsRegular() {
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

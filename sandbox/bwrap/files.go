package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// resolve maps a sandbox path to a host directory acting as its root and
// the path below it. Files are then opened with openat2(RESOLVE_IN_ROOT), so
// a symlink the sandbox planted resolves inside the sandbox's tree, never to
// the host's files.
func (s *Sandbox) resolve(p string) (root, rel string, readOnly bool, err error) {
	abs := sandbox.InSandboxPath(s.workdir, p)
	if abs == "/tmp" || strings.HasPrefix(abs, "/tmp/") {
		return s.tmp, strings.TrimPrefix(abs, "/tmp"), false, nil
	}
	if s.noImage {
		for _, h := range hiddenHostFiles {
			if abs == h {
				return "", "", true, fmt.Errorf("%s is hidden from sandboxes", abs)
			}
		}
		for _, h := range hiddenHostDirs {
			if abs == h || strings.HasPrefix(abs, h+"/") {
				return "", "", true, fmt.Errorf("%s is hidden from sandboxes", abs)
			}
		}
		for _, d := range hostSystemDirs {
			if abs == "/"+d || strings.HasPrefix(abs, "/"+d+"/") {
				return "/", abs, true, nil
			}
		}
	}
	return s.root.Merged, abs, false, nil
}

func openIn(root, rel string, flags int, mode uint32) (*os.File, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	return openAt(rfd, rel, flags, mode)
}

func openAt(rfd int, rel string, flags int, mode uint32) (*os.File, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	name := strings.TrimPrefix(rel, "/")
	if name == "" {
		name = "." // the root itself: openat2 refuses an empty path
	}
	fd, err := unix.Openat2(rfd, name, &how)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// ReadFile reads a file as the sandbox sees it.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.life.Usable(); err != nil {
		return nil, err
	}
	root, rel, _, err := s.resolve(p)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	if rel == "" {
		rel = "."
	}
	f, err := openIn(root, rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	return b, nil
}

// WriteFile writes a file into the sandbox, creating parent directories.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.life.Usable(); err != nil {
		return err
	}
	root, rel, ro, err := s.resolve(p)
	if err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if ro {
		return &fs.PathError{Op: "write", Path: p, Err: errors.New("the host's system directories are read-only in sandboxes without an image")}
	}
	if rel == "" || strings.HasSuffix(rel, "/") {
		return &fs.PathError{Op: "write", Path: p, Err: errors.New("not a file path")}
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	defer unix.Close(rfd)
	if err := mkdirAllAt(rfd, path.Dir(rel)); err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: fmt.Errorf("creating parent directories: %w", err)}
	}
	f, err := openAt(rfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, uint32(mode.Perm()))
	if err != nil {
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	// The mode given wins over the umask and over an existing file's mode.
	if err := f.Chmod(mode.Perm()); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	return f.Close()
}

// mkdirAllAt creates dir (absolute inside the root) one component at a
// time, each looked up with RESOLVE_IN_ROOT and created relative to its
// parent's descriptor.
func mkdirAllAt(rfd int, dir string) error {
	cur := "/"
	for _, name := range strings.Split(strings.Trim(dir, "/"), "/") {
		if name == "" {
			continue
		}
		next := path.Join(cur, name)
		f, err := openAt(rfd, next, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			f.Close()
			cur = next
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent, err := openAt(rfd, cur, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(int(parent.Fd()), name, 0o755)
		parent.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		cur = next
	}
	return nil
}

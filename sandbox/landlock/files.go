package landlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// systemDirs are the host directories bound read-only when there is no
// image root.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// File operations resolve inside the sandbox's root only, and refuse
// anything but regular files (a FIFO would block the engine), reading at
// most sandbox.MaxReadFile. A path in the workdir or /tmp without symlinks is
// served straight from the state directory (the same files the sandbox
// sees bound there); anything else — another directory, a path through a
// symlink — by a launcher that builds the sandbox's root as Exec does and
// resolves the path in it with openat2(RESOLVE_IN_ROOT), so a symlink
// means what it means inside (/etc/mtab is the sandbox's mount table).
// Files written either way are stored as the sandbox's root's: on disk as
// the engine's ids, which the sandbox's map (or idmapped mounts) shows as
// root inside.

// direct is the state directory holding abs when abs is in the workdir or
// /tmp, and abs relative to it.
func (s *Sandbox) direct(abs string) (base, rel string, ok bool) {
	for _, d := range []struct{ in, host string }{{s.cfg.Workdir, s.workDir()}, {"/tmp", s.tmpDir()}} {
		if abs == d.in {
			return d.host, ".", true
		}
		if r, ok := strings.CutPrefix(abs, d.in+"/"); ok {
			return d.host, r, true
		}
	}
	return "", "", false
}

// directResolve: below the state directory, no symlinks at all (ELOOP
// sends the operation to a launcher) and no other mounts.
const directResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// inRootResolve: the launcher's resolution in the sandbox's root.
const inRootResolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// ReadFile reads a regular file; relative paths are relative to the
// workdir.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading %s from landlock sandbox: %w", p, err)
	}
	abs := sandbox.InSandboxPath(s.cfg.Workdir, p)
	if base, rel, ok := s.direct(abs); ok {
		b, err := withDir(base, func(fd int) ([]byte, error) { return readAt(fd, rel, directResolve, sandbox.MaxReadFile) })
		if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) {
			return b, fileErr("read", p, err)
		}
	}
	b, err := s.fileInSandbox(ctx, fileOp{Op: "read", Path: abs}, nil)
	return b, fileErr("read", p, err)
}

// WriteFile writes a file, creating parent directories; relative paths are
// relative to the workdir. With ReadOnlyRoot only the workdir and /tmp are
// writable, and the host's system directories never are.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("writing %s into landlock sandbox: %w", p, err)
	}
	if mode == 0 {
		mode = 0o644
	}
	abs := sandbox.InSandboxPath(s.cfg.Workdir, p)
	if abs == s.cfg.Workdir || abs == "/tmp" {
		return fileErr("write", p, errors.New("it is a directory"))
	}
	if base, rel, ok := s.direct(abs); ok {
		_, err := withDir(base, func(fd int) ([]byte, error) { return nil, writeAt(fd, rel, directResolve, data, uint32(mode.Perm())) })
		if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EXDEV) {
			return fileErr("write", p, err)
		}
	}
	_, err := s.fileInSandbox(ctx, fileOp{Op: "write", Path: abs, Mode: uint32(mode.Perm())}, data)
	return fileErr("write", p, err)
}

func withDir(dir string, fn func(fd int) ([]byte, error)) ([]byte, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return fn(fd)
}

func fileErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	verb := map[string]string{"read": "reading %s from landlock sandbox", "write": "writing %s into landlock sandbox"}[op]
	if errors.Is(err, unix.EROFS) {
		err = fmt.Errorf("%w (only the workdir and /tmp are writable with read_only_root; the host's system directories never are)", err)
	}
	return fmt.Errorf(verb+": %w", p, &fs.PathError{Op: op, Path: p, Err: err})
}

// fileOp is a file operation a launcher performs in the sandbox's root.
type fileOp struct {
	Op   string `json:"op"` // read | write
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
}

// launcherFileError is a file operation's failure in the launcher.
type launcherFileError struct {
	msg   string
	errno syscall.Errno
}

func (e *launcherFileError) Error() string { return e.msg }
func (e *launcherFileError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// fileInSandbox runs op in a launcher (in the holder's root, as root of
// the sandbox): data is what to write; it returns what was read.
func (s *Sandbox) fileInSandbox(ctx context.Context, op fileOp, data []byte) ([]byte, error) {
	s.execMu.Lock()
	defer s.execMu.Unlock()
	sp := s.baseSpec()
	sp.File = &op
	res, err := s.runLauncher(ctx, sp, nil, data, time.Minute, sandbox.MaxReadFile, nil)
	if err != nil {
		return nil, err
	}
	return res.Stdout, nil
}

// doFile performs sp.File in the built root; the launcher runs it.
func doFile(sp spec) (st status) {
	fail := func(err error) status {
		st.FileErr = err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			st.FileErrno = int(errno)
		}
		return st
	}
	root, err := unix.Open(sp.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(root)
	switch sp.File.Op {
	case "read":
		b, err := readAt(root, sp.File.Path, inRootResolve, sandbox.MaxReadFile)
		if err != nil {
			return fail(err)
		}
		if _, err := os.Stdout.Write(b); err != nil {
			return fail(err)
		}
	case "write":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fail(err)
		}
		if err := writeAt(root, sp.File.Path, inRootResolve, b, sp.File.Mode); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown file operation %q", sp.File.Op))
	}
	return st
}

// copyTree copies src's contents into dst (which exists), keeping modes,
// owners (as root: a user's files made during setup stay the user's) and
// symlinks and overwriting files. Special files are skipped.
func copyTree(src, dst string) error {
	asRoot := os.Geteuid() == 0
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
		chown := func() error {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && asRoot {
				return os.Lchown(target, int(st.Uid), int(st.Gid))
			}
			return nil
		}
		switch {
		case d.IsDir():
			if rel == "." {
				return nil
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(target, info.Mode().Perm()|0o700); err != nil {
				return err
			}
			return chown()
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			os.Remove(target)
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			return chown()
		case info.Mode().IsRegular():
			if err := copyFile(p, target, info.Mode().Perm()); err != nil {
				return err
			}
			return chown()
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

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
)

// ReadFile and WriteFile are served by the exec server inside the sandbox
// (execproto/files.go): paths resolve in the sandbox's own view (with no
// image, /etc/mtab is the sandbox's mount table, not the engine's), only
// regular files are touched, so a FIFO at the path cannot block, and what a
// write creates belongs to the sandbox's root or user. They return when
// ctx ends, whatever the server does.

// ReadFile reads a regular file as the sandbox sees it.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	res, err := s.fileOp(ctx, execproto.FileMsg{Path: sandbox.InSandboxPath(s.workdir, p), Max: sandbox.MaxReadFile})
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	return res.Data, nil
}

// WriteFile writes a regular file into the sandbox, creating parent
// directories; what it creates is owned by Config.User (root by default).
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	abs := sandbox.InSandboxPath(s.workdir, p)
	if strings.HasSuffix(p, "/") || abs == "/" {
		return &fs.PathError{Op: "write", Path: p, Err: errors.New("not a file path")}
	}
	m := execproto.FileMsg{Write: true, Path: abs, Data: data, Mode: uint32(mode.Perm())}
	if s.inNS && (s.uid != 0 || s.gid != 0) {
		m.Chown, m.UID, m.GID = true, s.uid, s.gid
	}
	if _, err := s.fileOp(ctx, m); err != nil {
		if errors.Is(err, syscall.EROFS) && s.cfg.ReadOnlyRoot {
			err = fmt.Errorf("%w (read_only_root: only %s and /tmp are writable)", err, s.workdir)
		}
		return &fs.PathError{Op: "write", Path: p, Err: err}
	}
	return nil
}

// fileOp runs one file operation through the exec server.
func (s *Sandbox) fileOp(ctx context.Context, m execproto.FileMsg) (execproto.FileResult, error) {
	if err := s.life.Begin(); err != nil {
		return execproto.FileResult{}, err
	}
	defer s.life.End()
	srv, err := s.server(ctx)
	if err != nil {
		return execproto.FileResult{}, err
	}
	defer s.release(srv)
	c, err := srv.startFile(m)
	if err != nil {
		return execproto.FileResult{}, err
	}
	defer srv.forget(c)
	select {
	case res := <-c.file:
		return res, res.AsError()
	case <-srv.dead:
		return execproto.FileResult{}, srv.deadErr
	case <-ctx.Done():
		return execproto.FileResult{}, ctx.Err()
	case <-s.life.Done():
		return execproto.FileResult{}, errors.New("bwrap sandbox closed during the file operation")
	}
}

// mkdirOwned creates dir (absolute inside the sandbox) below root from the
// host, each component looked up with RESOLVE_IN_ROOT (a symlink in the
// image resolves inside it, never to a host path) and given to root inside;
// the last, when created, to Config.User, who works there.
func (s *Sandbox) mkdirOwned(root, dir string) error {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
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
		if err == nil && os.Geteuid() == 0 {
			uid, gid := s.hostUID, s.hostGID
			if next == path.Clean("/"+dir) && s.inNS {
				uid, gid = s.hostID(s.uid, false), s.hostID(s.gid, true)
			}
			err = unix.Fchownat(int(parent.Fd()), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		parent.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		cur = next
	}
	return nil
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

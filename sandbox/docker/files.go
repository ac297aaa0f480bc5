package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"evals.si/sandbox"
)

// File operations go through the daemon's archive API, which resolves
// paths in the container's root (symlinks included, so a link to a host
// path names the container's file of that name) and tars a FIFO, socket or
// device as a header without opening it: nothing the sandbox leaves at a
// path can block the engine, and the context bounds each request. Files
// are written as the container's root (the tar's owner 0, which a
// userns-remap daemon maps to its remapped root).

func tarKind(t byte) string {
	switch t {
	case tar.TypeDir:
		return "directory"
	case tar.TypeFifo:
		return "FIFO"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	}
	return "special file"
}

// ReadFile reads a regular file through the archive API, following
// symlinks inside the container, at most sandbox.MaxReadFile.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	want := s.abs(p)
	for range 16 {
		rc, _, err := s.cli.CopyFromContainer(ctx, s.id, want)
		if err != nil {
			if client.IsErrNotFound(err) {
				return nil, fmt.Errorf("reading %s from docker sandbox: %w", p, fs.ErrNotExist)
			}
			return nil, fmt.Errorf("reading %s from docker sandbox: %w", p, err)
		}
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("reading %s from docker sandbox: %w", p, err)
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
			if hdr.Size > sandbox.MaxReadFile {
				rc.Close()
				return nil, fmt.Errorf("reading %s from docker sandbox: it is %d bytes, larger than the %d MiB read cap", p, hdr.Size, sandbox.MaxReadFile>>20)
			}
			b, err := io.ReadAll(io.LimitReader(tr, sandbox.MaxReadFile))
			rc.Close()
			if err != nil {
				return nil, fmt.Errorf("reading %s from docker sandbox: %w", p, err)
			}
			return b, nil
		case tar.TypeSymlink:
			rc.Close()
			if path.IsAbs(hdr.Linkname) {
				want = path.Clean(hdr.Linkname)
			} else {
				want = path.Join(path.Dir(want), hdr.Linkname)
			}
		case tar.TypeDir:
			rc.Close()
			return nil, fmt.Errorf("reading %s from docker sandbox: is a directory", p)
		default:
			rc.Close()
			return nil, fmt.Errorf("reading %s from docker sandbox: %w", p, sandbox.NotRegular(tarKind(hdr.Typeflag)))
		}
	}
	return nil, fmt.Errorf("reading %s from docker sandbox: too many symlinks", p)
}

// WriteFile writes a file through the archive API, creating missing parent
// directories (0755); existing directories keep their modes.
func (s *Sandbox) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := s.usable(); err != nil {
		return err
	}
	full := s.abs(p)
	if full == "/" {
		return fmt.Errorf("writing %s into docker sandbox: not a file path", p)
	}
	if mode == 0 {
		mode = 0o644
	}
	// The archive API would replace a FIFO or device with the file; refuse
	// it instead, as every rung does. (A symlink there is replaced too:
	// docker writes the link's own path, inside the container.)
	if st, err := s.cli.ContainerStatPath(ctx, s.id, full); err == nil {
		switch m := st.Mode; {
		case m.IsDir():
			return fmt.Errorf("writing %s into docker sandbox: %w", p, sandbox.NotRegular("directory"))
		case m&fs.ModeNamedPipe != 0:
			return fmt.Errorf("writing %s into docker sandbox: %w", p, sandbox.NotRegular("FIFO"))
		case m&fs.ModeSocket != 0:
			return fmt.Errorf("writing %s into docker sandbox: %w", p, sandbox.NotRegular("socket"))
		case m&fs.ModeDevice != 0:
			return fmt.Errorf("writing %s into docker sandbox: %w", p, sandbox.NotRegular("device"))
		}
	} else if !client.IsErrNotFound(err) {
		return fmt.Errorf("writing %s into docker sandbox: %w", p, err)
	}
	// Find the deepest existing ancestor; the tar creates the rest.
	base := path.Dir(full)
	var missing []string
	for base != "/" {
		st, err := s.cli.ContainerStatPath(ctx, s.id, base)
		if err == nil {
			if !st.Mode.IsDir() {
				return fmt.Errorf("writing %s into docker sandbox: %s is not a directory", p, base)
			}
			break
		}
		if !client.IsErrNotFound(err) {
			return fmt.Errorf("writing %s into docker sandbox: %w", p, err)
		}
		missing = append([]string{path.Base(base)}, missing...)
		base = path.Dir(base)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	prefix := ""
	for _, d := range missing {
		prefix += d + "/"
		if err := tw.WriteHeader(&tar.Header{Name: prefix, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: prefix + path.Base(full), Typeflag: tar.TypeReg, Mode: int64(mode.Perm()), Size: int64(len(data))}); err != nil {
		return err
	}
	tw.Write(data)
	if err := tw.Close(); err != nil {
		return err
	}
	err := s.cli.CopyToContainer(ctx, s.id, base, &buf, container.CopyToContainerOptions{})
	if err != nil {
		if strings.Contains(err.Error(), "read-only") {
			return fmt.Errorf("writing %s into docker sandbox: the root is read-only (only the workdir and /tmp are writable): %w", p, err)
		}
		return fmt.Errorf("writing %s into docker sandbox: %w", p, err)
	}
	return nil
}

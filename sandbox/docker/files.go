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
)

// ReadFile reads a file through the archive API, following symlinks.
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
			b, err := io.ReadAll(tr)
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
			return nil, fmt.Errorf("reading %s from docker sandbox: not a regular file", p)
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

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// RootDatasets is datasets_dir as a directory of this machine. Every
// access goes through an os.Root opened for it, so neither .. nor a
// symlink reaches a file outside; symlinks inside are followed only as far
// as the root allows, and are never listed.
func RootDatasets(dir string) DatasetFiles { return rootDatasets{dir: dir} }

type rootDatasets struct{ dir string }

func (d rootDatasets) LocalDir() string { return d.dir }

// open opens the root at each use, so a datasets_dir made or replaced
// after the server started is seen.
func (d rootDatasets) open() (*os.Root, error) {
	root, err := os.OpenRoot(d.dir)
	if err != nil {
		return nil, fmt.Errorf("opening datasets_dir: %w", err)
	}
	return root, nil
}

func (d rootDatasets) List(ctx context.Context, dir string, fn func(DatasetInfo) error) error {
	if dir != "." {
		if err := checkName(dir); err != nil {
			return err
		}
	}
	root, err := d.open()
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), dir, func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		return fn(DatasetInfo{Path: name, Size: info.Size(), ModTime: info.ModTime()})
	})
}

func (d rootDatasets) Stat(ctx context.Context, name string) (DatasetInfo, error) {
	if err := checkName(name); err != nil {
		return DatasetInfo{}, err
	}
	root, err := d.open()
	if err != nil {
		return DatasetInfo{}, err
	}
	defer root.Close()
	info, err := root.Stat(name)
	if err != nil {
		return DatasetInfo{}, err
	}
	return DatasetInfo{Path: name, Size: info.Size(), ModTime: info.ModTime(), Dir: info.IsDir()}, nil
}

func (d rootDatasets) Open(ctx context.Context, name string) (DatasetFile, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	root, err := d.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("dataset %s is not a regular file: %w", name, fs.ErrNotExist)
	}
	return rootFile{f, DatasetInfo{Path: name, Size: info.Size(), ModTime: info.ModTime()}}, nil
}

func (d rootDatasets) Version(ctx context.Context, name string) (string, error) {
	f, err := d.Open(ctx, name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return "", fmt.Errorf("reading dataset %s: %w", name, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

type rootFile struct {
	*os.File
	info DatasetInfo
}

func (f rootFile) Info() DatasetInfo { return f.info }

// ctxReader stops a long read when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

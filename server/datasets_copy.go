package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"evals.si/spec"
)

// The dataset loaders (JSON Lines, the benchmark importers) read files in
// a directory. When datasets_dir is not on this machine (S3), a
// submission's dataset files are copied into a fresh temporary directory,
// loaded from there, and removed: the loaders see exactly the files the
// spec names, and nothing else of the server's.

// Bounds on what one submission copies: records are held in memory after
// loading anyway, so a dataset beyond these is a mistake, not a workload.
const (
	maxCopyBytes = 4 << 30
	maxCopyFiles = 10000
)

// copyingRecords loads a spec's dataset from a copy of its files.
type copyingRecords struct {
	files DatasetFiles
	next  Records
	log   *slog.Logger
}

func (c *copyingRecords) Records(ctx context.Context, f *spec.File) ([]spec.Record, error) {
	names, err := datasetFiles(f.Spec.Dataset)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "evalsi-dataset-")
	if err != nil {
		return nil, fmt.Errorf("loading the dataset: making a directory for its files: %w", err)
	}
	defer os.RemoveAll(dir)
	budget := &copyBudget{bytes: maxCopyBytes, files: maxCopyFiles}
	for field, name := range names {
		if err := c.copyOut(ctx, name, dir, budget); err != nil {
			if errors.Is(err, errOverBudget) || ctx.Err() != nil {
				return nil, fmt.Errorf("%s %q: %w", field, name, err)
			}
			// The storage's own error names the bucket and its answer: for
			// the log, not the submitter.
			c.log.Error("copying a dataset out of datasets_dir", "field", field, "path", name, "err", err)
			return nil, fmt.Errorf("%s %q could not be read from datasets_dir (the server log has the details)", field, name)
		}
	}
	g := *f
	g.Dir = dir
	g.Path = filepath.Join(dir, filepath.Base(f.Path))
	recs, err := c.next.Records(ctx, &g)
	if err != nil {
		// The message names files as the submitter wrote them.
		return nil, &rewordedError{msg: strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "datasets_dir/"), err: err}
	}
	return recs, nil
}

var errOverBudget = fmt.Errorf("the dataset is over what one submission may copy (%d files, %d bytes)", maxCopyFiles, maxCopyBytes)

type copyBudget struct{ bytes, files int64 }

// copyOut copies the file or directory name into dir.
func (c *copyingRecords) copyOut(ctx context.Context, name, dir string, budget *copyBudget) error {
	info, err := c.files.Stat(ctx, name)
	if err != nil {
		return err
	}
	if !info.Dir {
		return c.copyFile(ctx, name, dir, budget)
	}
	return c.files.List(ctx, name, func(info DatasetInfo) error {
		return c.copyFile(ctx, info.Path, dir, budget)
	})
}

func (c *copyingRecords) copyFile(ctx context.Context, name, dir string, budget *copyBudget) error {
	if err := checkName(name); err != nil {
		return err
	}
	p := filepath.Join(dir, filepath.FromSlash(name))
	if _, err := os.Lstat(p); err == nil {
		return nil // named twice (dataset.path inside dataset.uri's directory)
	}
	if budget.files--; budget.files < 0 {
		return errOverBudget
	}
	src, err := c.files.Open(ctx, name)
	if err != nil {
		return err
	}
	defer src.Close()
	if budget.bytes -= src.Info().Size; budget.bytes < 0 {
		return errOverBudget
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	// At most the size it had when opened: an object growing meanwhile
	// does not get past the budget.
	if _, err := io.Copy(dst, io.LimitReader(ctxReader{ctx, src}, src.Info().Size)); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// rewordedError is err with its message rewritten.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

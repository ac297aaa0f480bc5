package traces

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// maxLine bounds one line of an OTLP JSON file (one export batch).
const maxLine = 256 << 20

// traceFiles is where traces.file is read: the machine's files (embedded
// mode: the spec's author's own), or only those under Options.FileRoot (a
// server, whose files are not the submitter's to read).
type traceFiles struct {
	fsys fs.FS
	// base is prefixed to names in errors (fsys names have no leading /).
	base  string
	close func() error
}

func (s *Source) files(file, baseDir string) (*traceFiles, string, error) {
	if s.o.FileRoot == "" {
		p := file
		if !filepath.IsAbs(p) && baseDir != "" {
			p = filepath.Join(baseDir, p)
		}
		p, err := filepath.Abs(p)
		if err != nil {
			return nil, "", fmt.Errorf("traces file %s: %w", file, err)
		}
		return &traceFiles{fsys: os.DirFS("/"), base: "/", close: func() error { return nil }}, strings.TrimPrefix(p, "/"), nil
	}
	name := filepath.ToSlash(filepath.Clean(file))
	if filepath.IsAbs(file) || !fs.ValidPath(name) {
		return nil, "", fmt.Errorf("traces file %q must be a relative path inside %s, without ..", file, s.o.FileRoot)
	}
	// os.Root keeps symlinks from leading out of the root too.
	root, err := os.OpenRoot(s.o.FileRoot)
	if err != nil {
		return nil, "", fmt.Errorf("opening the traces directory: %w", err)
	}
	return &traceFiles{fsys: root.FS(), base: filepath.Clean(s.o.FileRoot) + "/", close: root.Close}, name, nil
}

// readFiles reads OTLP JSON lines from name, a file or a directory whose
// regular files (not hidden ones) are read in name order. Each non-empty
// line is one {"resourceSpans": […]} object, as the Collector's file
// exporter writes.
func (tf *traceFiles) read(ctx context.Context, name string) ([]*Span, error) {
	fi, err := fs.Stat(tf.fsys, name)
	if err != nil {
		return nil, fmt.Errorf("reading traces %s: %w", tf.base+name, unwrapPath(err))
	}
	files := []string{name}
	if fi.IsDir() {
		entries, err := fs.ReadDir(tf.fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading traces directory %s: %w", tf.base+name, unwrapPath(err))
		}
		files = files[:0]
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				files = append(files, path.Join(name, e.Name()))
			}
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("traces directory %s holds no files", tf.base+name)
		}
	}
	var all []*Span
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		spans, err := tf.readFile(f)
		if err != nil {
			return nil, err
		}
		all = append(all, spans...)
	}
	return all, nil
}

// unwrapPath drops a PathError's own (fsys-relative) path: the caller
// names the file.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (tf *traceFiles) readFile(name string) ([]*Span, error) {
	where := tf.base + name
	f, err := tf.fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading traces %s: %w", where, unwrapPath(err))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), maxLine)
	var out []*Span
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var td tracesData
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&td); err != nil {
			return nil, fmt.Errorf("%s:%d: not OTLP JSON (one {\"resourceSpans\": […]} object per line, as the OTel Collector's file exporter writes): %w", where, n, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: more than one JSON value on the line (want one {\"resourceSpans\": […]} object per line)", where, n)
		}
		spans, err := td.spans()
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", where, n, err)
		}
		out = append(out, spans...)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line is over %d MiB", where, maxLine>>20)
		}
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	return out, nil
}

// Package dataset turns a run spec's dataset into records: inline records,
// a JSONL file, or a URI whose scheme a registered Source serves
// (benchmark importers register swebench://, terminal-bench://, ...). It
// also merges a record's metadata.environment over the spec's environment.
package dataset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"evals.si/spec"
)

// Source serves the records of one URI scheme. baseDir is the spec file's
// directory, for URIs that name relative paths.
type Source interface {
	Records(ctx context.Context, u *url.URL, baseDir string) ([]spec.Record, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, u *url.URL, baseDir string) ([]spec.Record, error)

// Records calls f.
func (f SourceFunc) Records(ctx context.Context, u *url.URL, baseDir string) ([]spec.Record, error) {
	return f(ctx, u, baseDir)
}

// Registry maps URI schemes to sources. The engine builds one and registers
// the importers it has; there is no global registry.
type Registry struct {
	sources map[string]Source
	runs    RunRecords
	traces  TraceRecords
}

// RunRecords serves dataset: {run: ...}: the records of another run. Hosts
// that have a store set one (ServeRuns).
type RunRecords interface {
	RunRecords(ctx context.Context, d spec.RunDataset) ([]spec.Record, error)
}

// TraceRecords serves dataset: {traces: ...}: records built from a trace
// backend's traces. baseDir resolves a relative traces.file.
type TraceRecords interface {
	TraceRecords(ctx context.Context, d spec.TracesDataset, baseDir string) ([]spec.Record, error)
}

// ServeRuns makes src serve dataset: {run: ...}.
func (r *Registry) ServeRuns(src RunRecords) { r.runs = src }

// ServeTraces makes src serve dataset: {traces: ...}.
func (r *Registry) ServeTraces(src TraceRecords) { r.traces = src }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{sources: map[string]Source{}} }

// Register makes src serve scheme (without "://"). Registering a scheme
// twice, or an empty scheme or nil source, is a programming error and
// panics, as http.ServeMux does.
func (r *Registry) Register(scheme string, src Source) {
	scheme = strings.ToLower(scheme)
	if scheme == "" || src == nil {
		panic("dataset: Register needs a scheme and a source")
	}
	if _, dup := r.sources[scheme]; dup {
		panic(fmt.Sprintf("dataset: scheme %q registered twice", scheme))
	}
	r.sources[scheme] = src
}

// Schemes lists the registered schemes, sorted.
func (r *Registry) Schemes() []string {
	out := make([]string, 0, len(r.sources))
	for s := range r.sources {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Load returns the spec's records: the inline ones, those of dataset.path
// (JSONL, relative to the spec's directory), or those the source of
// dataset.uri's scheme serves. Records from a file or a source are checked
// for ids as inline ones are: present and unique. Errors about the spec
// point at the dataset field in the spec file.
func (r *Registry) Load(ctx context.Context, f *spec.File) ([]spec.Record, error) {
	d := f.Spec.Dataset
	switch {
	case d.Records != nil:
		return slices.Clone(d.Records), nil
	case d.Path != "":
		p := d.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(f.Dir, p)
		}
		recs, err := ReadFile(p)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// The file cannot be read: point at the spec line that names it.
			return nil, fmt.Errorf("%v: %w", f.Errorf("dataset.path", "cannot read dataset %s", d.Path), err)
		}
		// Problems inside the file carry their own file:line.
		return recs, err
	case d.URI != "":
		u, err := url.Parse(d.URI)
		if err != nil || u.Scheme == "" {
			return nil, f.Errorf("dataset.uri", "dataset.uri %q is not a URI such as swebench://data/test.jsonl", d.URI)
		}
		src, ok := r.sources[strings.ToLower(u.Scheme)]
		if !ok {
			known := "none are registered"
			if s := r.Schemes(); len(s) > 0 {
				known = "registered: " + strings.Join(s, ", ")
			}
			return nil, f.Errorf("dataset.uri", "no dataset source for scheme %q (%s)", u.Scheme, known)
		}
		recs, err := src.Records(ctx, u, f.Dir)
		if err != nil {
			return nil, fmt.Errorf("loading dataset %s: %w", d.URI, err)
		}
		if err := checkIDs(recs); err != nil {
			return nil, fmt.Errorf("dataset %s: %w", d.URI, err)
		}
		return recs, nil
	case d.Run != nil:
		if r.runs == nil {
			return nil, f.Errorf("dataset.run", "dataset: {run} is not available here (it needs the store of the run)")
		}
		recs, err := r.runs.RunRecords(ctx, *d.Run)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", f.Errorf("dataset.run", "loading the records of run %s", d.Run.RunID), err)
		}
		return recs, checkIDs(recs)
	case d.Traces != nil:
		if r.traces == nil {
			return nil, f.Errorf("dataset.traces", "dataset: {traces} is not available here")
		}
		recs, err := r.traces.TraceRecords(ctx, *d.Traces, f.Dir)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", f.Errorf("dataset.traces", "loading traces of service %s", d.Traces.Service), err)
		}
		return recs, checkIDs(recs)
	}
	return nil, f.Errorf("dataset", "dataset needs records, path, uri, run or traces")
}

// checkIDs reports records without an id, or with one used before.
func checkIDs(recs []spec.Record) error {
	first := map[string]int{}
	for i, r := range recs {
		if r.ID == "" {
			return fmt.Errorf("record %d has no id", i+1)
		}
		if j, dup := first[r.ID]; dup {
			return fmt.Errorf("duplicate record id %q (records %d and %d)", r.ID, j+1, i+1)
		}
		first[r.ID] = i
	}
	return nil
}

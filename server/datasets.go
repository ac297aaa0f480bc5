package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"evals.si/access"
	"evals.si/api"
)

// Datasets are files under datasets_dir: a directory of this machine, read
// through an os.Root so that no path (.., a symlink out) reaches beyond it
// (datasets_root.go), or a prefix of an S3 bucket (datasets_s3.go), where a
// key that is not a clean relative path is never a dataset. A dataset's
// version is its content digest; a run over it records the version it used.

// DatasetFiles is datasets_dir. Every name is a clean relative path
// ("a/b.jsonl"); an implementation refuses any other with fs.ErrInvalid.
// A missing file is fs.ErrNotExist.
type DatasetFiles interface {
	// List calls fn for each regular file under dir ("." for all), in
	// lexical order of path.
	List(ctx context.Context, dir string, fn func(DatasetInfo) error) error
	// Stat describes a file or a directory (in S3: a prefix with keys).
	Stat(ctx context.Context, name string) (DatasetInfo, error)
	// Open opens a regular file.
	Open(ctx context.Context, name string) (DatasetFile, error)
	// Version is a regular file's version: "sha256:<hex>" of its content.
	Version(ctx context.Context, name string) (string, error)
	// LocalDir is the directory holding the files on this machine, or ""
	// when they are elsewhere: the dataset loaders read files from a
	// directory, so a submission's files are first copied out of a
	// remote datasets_dir (datasets_copy.go).
	LocalDir() string
}

// DatasetInfo describes a file of datasets_dir.
type DatasetInfo struct {
	Path    string
	Size    int64
	ModTime time.Time
	Dir     bool
}

// DatasetFile is an open dataset file; it seeks, so it can be served in
// ranges.
type DatasetFile interface {
	io.ReadSeekCloser
	Info() DatasetInfo
}

// cleanDatasetPath checks a dataset path from a request: relative, clean,
// no dot segments.
func cleanDatasetPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
		return "", badRequest("path", "dataset path %q must be a clean relative path under datasets_dir", p)
	}
	return p, nil
}

// checkName is cleanDatasetPath for the implementations: fs.ErrInvalid.
func checkName(name string) error {
	if _, err := cleanDatasetPath(name); err != nil {
		return fmt.Errorf("dataset %q: %w", name, fs.ErrInvalid)
	}
	return nil
}

func (s *Server) datasets() (DatasetFiles, error) {
	if s.o.Datasets == nil {
		return nil, notFound("this server has no datasets_dir")
	}
	return s.o.Datasets, nil
}

// statTimeout bounds a Stat made without a request's context.
const statTimeout = 30 * time.Second

// datasetsRoot is datasets_dir as insideDatasets (confine.go) checks a
// path: Stat and Close. It has no request context to pass on, so a Stat is
// bounded by statTimeout instead.
func (s *Server) datasetsRoot() (datasetsStat, error) {
	d, err := s.datasets()
	if err != nil {
		return datasetsStat{}, err
	}
	return datasetsStat{d}, nil
}

type datasetsStat struct{ d DatasetFiles }

func (r datasetsStat) Stat(name string) (DatasetInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), statTimeout)
	defer cancel()
	return r.d.Stat(ctx, name)
}

func (datasetsStat) Close() error { return nil }

// datasetDigest is the version of a datasets_dir file.
func (s *Server) datasetDigest(p string) (string, error) {
	d, err := s.datasets()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return d.Version(ctx, p)
}

func (s *Server) listDatasets(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "dataset", Project: p.Project}, access.Request{Action: "datasets.read", Time: s.o.Now()}); err != nil {
		return err
	}
	d, err := s.datasets()
	if err != nil {
		return err
	}
	out := api.DatasetList{Datasets: []api.Dataset{}}
	err = d.List(r.Context(), ".", func(info DatasetInfo) error {
		// Another project's promoted datasets are not listed.
		if owner := promotedOwner(info.Path); owner != "" && owner != p.Project {
			return nil
		}
		version, err := d.Version(r.Context(), info.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since it was listed
		}
		if err != nil {
			return err
		}
		out.Datasets = append(out.Datasets, api.Dataset{Path: info.Path, Size: info.Size, Version: version})
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing datasets_dir: %w", err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getDataset(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	name, err := cleanDatasetPath(r.PathValue("path"))
	if err != nil {
		return err
	}
	project := p.Project
	if rest, ok := strings.CutPrefix(name, "promoted/"); ok {
		project, _, _ = strings.Cut(rest, "/")
	}
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "dataset", Project: project, Name: name}, access.Request{Action: "datasets.read", Time: s.o.Now()}); err != nil {
		if project != p.Project {
			return notFound("no dataset %s", name)
		}
		return err
	}
	d, err := s.datasets()
	if err != nil {
		return err
	}
	f, err := d.Open(r.Context(), name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return notFound("no dataset %s", name)
		}
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		s.log.Warn("dataset cannot be read", "path", name, "err", err)
		return notFound("dataset %s cannot be read", name)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, path.Base(name), f.Info().ModTime, f)
	return nil
}

// datasetsOf is the datasets_dir and dataset loader a server uses.
func datasetsOf(o Options) (DatasetFiles, Records) {
	d := o.Datasets
	if d == nil && o.DatasetsDir != "" {
		d = RootDatasets(o.DatasetsDir)
	}
	if d != nil && d.LocalDir() == "" {
		return d, &copyingRecords{files: d, next: o.Records, log: o.Logger}
	}
	return d, o.Records
}

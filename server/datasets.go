package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"

	"evals.si/access"
	"evals.si/api"
)

// Datasets are files under datasets_dir, read through an os.Root so that no
// path (.., a symlink out) reaches beyond it. A dataset's version is its
// content digest; a run over it records the version it used.

func (s *Server) datasetsRoot() (*os.Root, error) {
	if s.o.DatasetsDir == "" {
		return nil, notFound("this server has no datasets_dir")
	}
	root, err := os.OpenRoot(s.o.DatasetsDir)
	if err != nil {
		return nil, fmt.Errorf("opening datasets_dir: %w", err)
	}
	return root, nil
}

// cleanDatasetPath checks a dataset path from a request: relative, clean,
// no dot segments.
func cleanDatasetPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || slices.Contains(strings.Split(p, "/"), "..") {
		return "", badRequest("path", "dataset path %q must be a clean relative path under datasets_dir", p)
	}
	return p, nil
}

// datasetDigest is the version of a datasets_dir file.
func (s *Server) datasetDigest(p string) (string, error) {
	root, err := s.datasetsRoot()
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func (s *Server) listDatasets(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "dataset", Project: p.Project}, access.Request{Action: "datasets.read", Time: s.o.Now()}); err != nil {
		return err
	}
	root, err := s.datasetsRoot()
	if err != nil {
		return err
	}
	defer root.Close()
	out := api.DatasetList{Datasets: []api.Dataset{}}
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Another project's promoted datasets are not listed.
			if rest, ok := strings.CutPrefix(name, "promoted/"); ok && !strings.Contains(rest, "/") && rest != p.Project {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || r.Context().Err() != nil {
			return r.Context().Err()
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		digest, err := s.datasetDigest(name)
		if err != nil {
			return err
		}
		out.Datasets = append(out.Datasets, api.Dataset{Path: name, Size: info.Size(), Version: digest})
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
	root, err := s.datasetsRoot()
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return notFound("no dataset %s", name)
		}
		return notFound("dataset %s cannot be read", name)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return notFound("no dataset file %s", name)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, path.Base(name), info.ModTime(), f)
	return nil
}

package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"strconv"

	"evals.si/access"
	"evals.si/api"
	"evals.si/engine"
	"evals.si/report"
	"evals.si/runqueue"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// submit starts a run: the spec is checked as the CLI checks it, the
// principal must be allowed to create it (roles and CEL rules over the run,
// its agent included), the secrets it names must be granted to the project,
// and the programs it would start on a worker must be trusted. Only then
// are its records loaded (relative to datasets_dir) and its trials queued.
func (s *Server) submit(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	var req api.SubmitRequest
	if err := decode(w, r, maxSubmitBytes, &req); err != nil {
		return err
	}
	project := req.Project
	if project == "" {
		project = p.Project
	}
	if project == "" {
		return badRequest("project", "name the project the run belongs to (this token belongs to none)")
	}
	if len(req.Spec) == 0 || string(req.Spec) == "null" {
		return badRequest("spec", "the request needs the run spec (spec: {...})")
	}
	name := filepath.Base(req.Name)
	if name == "." || name == "/" || req.Name == "" {
		name = "spec.yaml"
	}
	f, err := spec.Parse(name, req.Spec)
	if err != nil {
		return badRequest("spec", "%v", err)
	}
	f.Dir = s.o.DatasetsDir
	f.Path = filepath.Join(s.o.DatasetsDir, name)
	if err := f.Spec.Validate(); err != nil {
		return badRequest("spec", "%v", err)
	}
	res := access.RunResource(project, f.Spec)
	if err := s.confinePaths(f.Spec, res.Paths); err != nil {
		return err
	}
	if err := s.o.Access.Authorize(r.Context(), p, res, access.Request{Action: "runs.create", Time: s.o.Now()}); err != nil {
		return err
	}
	if err := s.o.Access.CheckGrants(project, f.Spec); err != nil {
		return refused(err)
	}
	if err := s.o.Access.CheckPrograms(access.WorkerPrograms(f.Spec)); err != nil {
		return refused(err)
	}
	// A dataset taken from another run reads that run: the submitter must
	// be allowed to read it, in its own project.
	for _, id := range access.ReadsRuns(f.Spec) {
		if _, err := s.readRun(r.Context(), p, id, "runs.read"); err != nil {
			return refused(fmt.Errorf("dataset.run: %w", err))
		}
	}
	records, err := s.o.Records.Records(r.Context(), f)
	if err != nil {
		return badRequest("spec.dataset", "%v", err)
	}
	// Records from a file, a URI or another run can carry their own
	// environments (images, parsers): the rules and the trust lists see
	// them as they see the spec's.
	if err := s.o.Access.Authorize(r.Context(), p, access.WithRecords(res, records), access.Request{Action: "runs.create", Time: s.o.Now()}); err != nil {
		return err
	}
	for _, rec := range records {
		if err := s.o.Access.CheckPrograms(access.RecordPrograms(rec)); err != nil {
			return refused(err)
		}
	}
	version, err := s.datasetVersion(f, records)
	if err != nil {
		return err
	}
	run, err := runqueue.Submit(r.Context(), s.o.Store, runqueue.Submission{
		Name: f.Spec.Name, SpecPath: f.Path, Spec: f.Spec, Records: records, Limits: engine.LimitsOf(f.Spec),
		Project: project, DatasetVersion: version,
	})
	if err != nil {
		return err
	}
	s.log.Info("run submitted", "run", run.ID, "project", project, "by", p.ID, "records", len(records))
	out, err := s.apiRun(r.Context(), run)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// confinePaths refuses a spec naming files the server or a worker would
// read on the submitter's behalf outside datasets_dir: the dataset's path,
// uri and traces file must be clean relative paths inside datasets_dir
// (through an os.Root, so no symlink leads out), and nothing may name a file
// on a worker (a script_file, a recording dir): the CLI inlines scripts
// before it submits, and a worker's files hold its credentials.
func (s *Server) confinePaths(sp *spec.Spec, paths []string) error {
	d := sp.Dataset
	server := map[string]string{}
	if d.Path != "" {
		server[d.Path] = "dataset.path"
	}
	if d.URI != "" {
		if u, err := url.Parse(d.URI); err == nil {
			server[u.Host+u.Path] = "dataset.uri"
			for k, vs := range u.Query() {
				for _, v := range vs {
					if strings.Contains(v, "/") || strings.HasSuffix(k, "_dir") {
						server[v] = "dataset.uri " + k
					}
				}
			}
		}
		server[d.URI] = "dataset.uri"
	}
	if t := d.Traces; t != nil && t.File != "" {
		server[t.File] = "dataset.traces.file"
	}
	for p, field := range server {
		if p == d.URI {
			continue
		}
		if err := s.insideDatasets(p); err != nil {
			return badRequest("spec."+field, "%s %q: %v", field, p, err)
		}
	}
	for _, p := range paths {
		if _, ok := server[p]; ok {
			continue
		}
		return refused(fmt.Errorf("the spec names %q, a file on the worker; a spec run on a server may name files only under the server's datasets_dir (inline scripts: evalsi run --server inlines script_file)", p))
	}
	return nil
}

// insideDatasets checks that p is a clean relative path that resolves
// inside datasets_dir.
func (s *Server) insideDatasets(p string) error {
	if p == "" {
		return nil
	}
	if _, err := cleanDatasetPath(p); err != nil {
		return errors.New("must be a clean path relative to the server's datasets_dir")
	}
	root, err := s.datasetsRoot()
	if err != nil {
		return errors.New("this server has no datasets_dir")
	}
	defer root.Close()
	if _, err := root.Stat(p); err != nil {
		return errors.New("is not a file under the server's datasets_dir")
	}
	return nil
}

// datasetVersion names the dataset a run used: the content digest of its
// datasets_dir file (what GET /v1/datasets shows), else of its records.
func (s *Server) datasetVersion(f *spec.File, records []spec.Record) (string, error) {
	if p := f.Spec.Dataset.Path; p != "" {
		if d, err := s.datasetDigest(p); err == nil {
			return d, nil
		}
	}
	if d := f.Spec.Dataset.Run; d != nil {
		return "run:" + d.RunID, nil
	}
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, rec := range records {
		if err := enc.Encode(rec); err != nil {
			return "", fmt.Errorf("hashing record %q: %w", rec.ID, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// readRun loads a run the principal may read; another project's run is
// not found, whether it exists or not.
func (s *Server) readRun(ctx context.Context, p access.Principal, id, action string) (store.Run, error) {
	run, err := s.o.Store.GetRun(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return store.Run{}, notFound("no run %s", id)
		}
		return store.Run{}, err
	}
	if err := s.o.Access.Authorize(ctx, p, access.Resource{Kind: "run", Project: run.Project, Name: run.ID}, access.Request{Action: action, Time: s.o.Now()}); err != nil {
		if p.Project != "" && p.Project != run.Project {
			return store.Run{}, notFound("no run %s", id)
		}
		return store.Run{}, err
	}
	return run, nil
}

func (s *Server) apiRun(ctx context.Context, run store.Run) (api.Run, error) {
	counts, err := s.o.Store.CountTrials(ctx, run.ID)
	if err != nil {
		return api.Run{}, err
	}
	out := api.Run{ID: run.ID, Name: run.Name, Project: run.Project, Status: run.Status, CreatedAt: run.CreatedAt,
		FinishedAt: run.FinishedAt, Error: run.Error, DatasetVersion: run.DatasetVersion, Counts: counts}
	if out.Counts == nil {
		out.Counts = map[string]int{}
	}
	if len(run.Summary) > 0 {
		var sum engine.Summary
		if err := json.Unmarshal(run.Summary, &sum); err != nil {
			return api.Run{}, fmt.Errorf("decoding the summary of run %s: %w", run.ID, err)
		}
		out.Summary = &sum
	}
	return out, nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	q := r.URL.Query()
	project := q.Get("project")
	if project == "" {
		project = p.Project
	}
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "run", Project: project}, access.Request{Action: "runs.read", Time: s.o.Now()}); err != nil {
		return err
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit", "limit must be a number from 1 to 1000, not %q", v)
		}
		limit = n
	}
	runs, err := s.o.Store.ListRuns(r.Context(), store.ListRunsOptions{Limit: limit + 1, Status: q.Get("status"), Name: q.Get("name"), Before: q.Get("before"), Project: project})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return badRequest("before", "no run %s to page from", q.Get("before"))
		}
		return err
	}
	out := api.RunList{Runs: []api.Run{}}
	if len(runs) > limit {
		runs = runs[:limit]
		out.Next = runs[limit-1].ID
	}
	for _, run := range runs {
		ar, err := s.apiRun(r.Context(), run)
		if err != nil {
			return err
		}
		out.Runs = append(out.Runs, ar)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	run, err := s.readRun(r.Context(), p, r.PathValue("id"), "runs.read")
	if err != nil {
		return err
	}
	out, err := s.apiRun(r.Context(), run)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listTrials(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	run, err := s.readRun(r.Context(), p, r.PathValue("id"), "runs.read")
	if err != nil {
		return err
	}
	trials, err := s.o.Store.ListTrials(r.Context(), run.ID)
	if err != nil {
		return err
	}
	scores, err := s.o.Store.Scores(r.Context(), run.ID)
	if err != nil {
		return err
	}
	out := api.TrialList{Trials: make([]api.Trial, 0, len(trials))}
	for _, t := range trials {
		at := api.Trial{ID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt, Status: t.Status,
			Passed: t.Passed, ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output, CostUSD: t.CostUSD,
			InputTokens: t.Usage.InputTokens, OutputTokens: t.Usage.OutputTokens, Scores: map[string]float64{},
			StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		for _, sc := range scores[t.ID] {
			at.Scores[sc.Name] = sc.Value
		}
		out.Trials = append(out.Trials, at)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readTrial loads an attempt whose run the principal may read.
func (s *Server) readTrial(ctx context.Context, p access.Principal, id string) (store.Trial, error) {
	t, err := s.o.Store.GetTrial(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return store.Trial{}, notFound("no trial %s", id)
		}
		return store.Trial{}, err
	}
	if _, err := s.readRun(ctx, p, t.RunID, "runs.read"); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			return store.Trial{}, notFound("no trial %s", id)
		}
		return store.Trial{}, err
	}
	return t, nil
}

func (s *Server) trialEvents(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	t, err := s.readTrial(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	q := r.URL.Query()
	after, limit := 0, 1000
	if v := q.Get("after"); v != "" {
		if after, err = strconv.Atoi(v); err != nil || after < 0 {
			return badRequest("after", "after must be a sequence number (0 or more), not %q", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 10000 {
			return badRequest("limit", "limit must be a number from 1 to 10000, not %q", v)
		}
	}
	evs, err := s.o.Store.Events(r.Context(), t.ID, after, limit)
	if err != nil {
		return err
	}
	out := api.EventList{Events: evs}
	if out.Events == nil {
		out.Events = []trajectory.Event{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) exportRun(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	run, err := s.readRun(r.Context(), p, r.PathValue("id"), "runs.read")
	if err != nil {
		return err
	}
	if f := r.URL.Query().Get("format"); f != "" && f != "jsonl" {
		return badRequest("format", "the export format is jsonl, not %q", f)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := report.ExportJSONL(r.Context(), w, s.o.Store, run.ID); err != nil {
		// Headers are out; the truncated body is all the client can see.
		s.log.Error("exporting a run", "run", run.ID, "err", err)
	}
	return nil
}

func (s *Server) promote(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	if s.o.Promote == nil {
		return notFound("promote is not available on this server")
	}
	run, err := s.readRun(r.Context(), p, r.PathValue("id"), "runs.read")
	if err != nil {
		return err
	}
	var req api.PromoteRequest
	if err := decode(w, r, maxBodyBytes, &req); err != nil {
		return err
	}
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "dataset", Project: run.Project, Name: req.Dataset}, access.Request{Action: "datasets.write", Time: s.o.Now()}); err != nil {
		return err
	}
	if req.Dataset == "" {
		return badRequest("dataset", "name the dataset to promote into")
	}
	res, err := s.o.Promote(r.Context(), s.o.Store, run.Project, run.ID, req)
	if err != nil {
		return badRequest("", "%v", err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

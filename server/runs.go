package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

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
	// Parsing a spec is the costliest thing a request can make the server
	// do: only a principal that may create runs gets that far, and only a
	// few submissions are parsed at once.
	if err := s.o.Access.Authorize(r.Context(), p, access.Resource{Kind: "run", Project: p.Project}, access.Request{Action: "runs.create", Time: s.o.Now()}); err != nil {
		return err
	}
	select {
	case s.submits <- struct{}{}:
		defer func() { <-s.submits }()
	case <-r.Context().Done():
		return r.Context().Err()
	}
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
	// The workers do not enforce a run's budget yet: refuse it rather than
	// run without the cap the submitter asked for.
	if f.Spec.Budget != nil {
		return badRequest("spec", "budget: a run's spend cap is enforced by embedded runs only (evalsi run without --server); remove budget to run on this server")
	}
	res := access.RunResource(project, f.Spec)
	if err := s.confineSubmit(project, f.Spec, &res); err != nil {
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
		// The message names the file as the submitter wrote it, not where
		// the server keeps datasets_dir.
		return badRequest("spec.dataset", "%s", s.hideDatasetsDir(err.Error()))
	}
	if err := s.confineRecords(f.Spec, records); err != nil {
		return err
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
		Name: f.Spec.Name, SpecPath: name, Spec: f.Spec, Records: records, Limits: engine.LimitsOf(f.Spec),
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

// hideDatasetsDir writes datasets_dir's absolute path as "datasets_dir".
func (s *Server) hideDatasetsDir(msg string) string {
	if s.o.DatasetsDir == "" {
		return msg
	}
	return strings.ReplaceAll(msg, strings.TrimRight(s.o.DatasetsDir, "/")+"/", "datasets_dir/")
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
	limit, err := intParam(q, "limit", 50, 1, 1000)
	if err != nil {
		return err
	}
	status := q.Get("status")
	switch status {
	case "", store.RunRunning, store.RunCompleted, store.RunInterrupted, store.RunFailed, store.RunCancelled:
	default:
		return badRequest("status", "status must be one of %s, %s, %s, %s, %s, not %q", store.RunRunning, store.RunCompleted, store.RunInterrupted, store.RunFailed, store.RunCancelled, status)
	}
	// The cursor must be a run of this project: another project's run
	// would page by its creation time, telling that it exists and when.
	before := q.Get("before")
	if before != "" {
		run, err := s.o.Store.GetRun(r.Context(), before)
		if err != nil || run.ID != before || run.Project != project {
			if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrAmbiguous) {
				return err
			}
			return badRequest("before", "no run %s to page from", before)
		}
	}
	runs, err := s.o.Store.ListRuns(r.Context(), store.ListRunsOptions{Limit: limit + 1, Status: status, Name: q.Get("name"), Before: before, Project: project})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return badRequest("before", "no run %s to page from", before)
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

// cancelRun cancels a run (runs.cancel): its pending trials never start,
// its running ones lose their lease (each worker is told at its next
// heartbeat and stops the attempt), and the run is summarized as cancelled
// over the trials that finished before. Cancelling a run that has ended
// returns it as it is; so does cancelling it again, which also records the
// summary if an earlier cancel could not (the server stopped between the
// two).
func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	run, err := s.readRun(r.Context(), p, r.PathValue("id"), access.PermRunsCancel)
	if err != nil {
		return err
	}
	// Once the store has the cancel, the summary follows even when the
	// client goes away.
	ctx := context.WithoutCancel(r.Context())
	after, err := s.o.Store.CancelRun(ctx, run.ID)
	if err != nil {
		return err
	}
	if run.Status == store.RunRunning && after.Status == store.RunCancelled {
		s.log.Info("run cancelled", "run", run.ID, "project", run.Project, "by", p.ID)
	}
	if after.Status == store.RunCancelled && len(after.Summary) == 0 {
		s.finalizeIfDone(ctx, run.ID)
		if after, err = s.o.Store.GetRun(ctx, run.ID); err != nil {
			return err
		}
	}
	out, err := s.apiRun(ctx, after)
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
	after, err := intParam(q, "after", 0, 0, math.MaxInt32)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", 1000, 1, 10000)
	if err != nil {
		return err
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
	if q := r.URL.Query(); q.Has("format") && q.Get("format") != "jsonl" {
		f := q.Get("format")
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

// intParam reads the integer query parameter name, def when absent; a
// present one (even empty) must be a number from lo to hi.
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	if !q.Has(name) {
		return def, nil
	}
	v := q.Get(name)
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest(name, "%s must be a number from %d to %d, not %q", name, lo, hi, v)
	}
	return n, nil
}

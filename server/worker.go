package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"evals.si/access"
	"evals.si/api"
	"evals.si/engine"
	"evals.si/runqueue"
	"evals.si/store"
)

// The worker API: a worker (a service token with worker.lease) leases an
// attempt, reads the spec of its run to plan it, then heartbeats, appends
// events and finishes under the lease's epoch. A lease is owned by
// "<token>/<worker name>"; the fenced writes also check that the caller's
// token owns the attempt's lease, so one worker cannot write into
// another's attempt even when it guesses an epoch.

// workerAllowed checks that p may work the queue: of every project, or of
// the projects a confined worker serves. The queue resource names a project
// the worker serves (none when it serves all), so a confined worker passes
// too; the leases it gets are confined to its projects by lease, and every
// later write checks that its token owns the lease.
func (s *Server) workerAllowed(ctx context.Context, p access.Principal) error {
	res := access.Resource{Kind: "queue"}
	if len(p.Projects) > 0 {
		res.Project = p.Projects[0]
	}
	return s.o.Access.Authorize(ctx, p, res, access.Request{Action: "worker.lease", Time: s.o.Now()})
}

// ownedBy reports whether a lease owner (owner's form) is p's: worker names
// have no '/', so the token is everything before the last one, compared
// whole (a token named "w" owns nothing of a token named "w/x").
func ownedBy(leaseOwner string, p access.Principal) bool {
	i := strings.LastIndexByte(leaseOwner, '/')
	return i >= 0 && leaseOwner[:i] == p.ID
}

func (s *Server) ttl(ms int64) time.Duration {
	if ms <= 0 {
		return s.o.LeaseTTL
	}
	// Clamped before it is multiplied: a huge ttl_ms must not wrap around.
	if ms > s.o.MaxLeaseTTL.Milliseconds() {
		return s.o.MaxLeaseTTL
	}
	return min(max(time.Duration(ms)*time.Millisecond, time.Second), s.o.MaxLeaseTTL)
}

func validWorkerName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for _, r := range n {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.:@", r))) {
			return false
		}
	}
	return true
}

func owner(p access.Principal, worker string) string { return p.ID + "/" + worker }

func (s *Server) lease(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	if err := s.workerAllowed(r.Context(), p); err != nil {
		return err
	}
	var req api.LeaseRequest
	if err := decode(w, r, maxBodyBytes, &req); err != nil {
		return err
	}
	if !validWorkerName(req.Worker) {
		return badRequest("worker", "worker must be 1 to 128 letters, digits or -_.:@, not %q", req.Worker)
	}
	for i, id := range req.Runs {
		if id == "" {
			return badRequest(fmt.Sprintf("runs[%d]", i), "runs lists run ids; entry %d is empty", i)
		}
	}
	ttl := s.ttl(req.TTLMS)
	lr := store.LeaseRequest{Worker: owner(p, req.Worker), TTL: ttl, Runs: req.Runs, Projects: slices.Clone(p.Projects)}
	l, err := s.o.Store.Lease(r.Context(), lr)
	if errors.Is(err, store.ErrNoWork) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.Lease{RunID: l.RunID, TrialID: l.TrialID, Record: l.Record, Trial: l.Trial,
		Attempt: l.Attempt, RetriesUsed: l.RetriesUsed, Epoch: l.Epoch, TTLMS: ttl.Milliseconds(),
		PriorUsage: l.SpendUsage, PriorCostUSD: l.SpendCostUSD})
	return nil
}

// workerRun gives a worker the spec of a run it holds (or held) a lease in.
func (s *Server) workerRun(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	if err := s.workerAllowed(r.Context(), p); err != nil {
		return err
	}
	run, err := s.o.Store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		return notFound("no run %s", r.PathValue("id"))
	}
	attempts, err := s.o.Store.ListAttempts(r.Context(), run.ID)
	if err != nil {
		return err
	}
	held := false
	for _, t := range attempts {
		if ownedBy(t.LeaseOwner, p) {
			held = true
			break
		}
	}
	if !held {
		return notFound("no run %s among the runs this worker leased trials of", run.ID)
	}
	writeJSON(w, http.StatusOK, api.RunSpec{ID: run.ID, Name: run.Name, SpecPath: run.SpecPath, Spec: run.Spec})
	return nil
}

// leased checks that the attempt is leased by the caller and returns the
// store lease its fenced writes go through.
func (s *Server) leased(ctx context.Context, p access.Principal, trialID string, epoch int64) (store.Lease, error) {
	if err := s.workerAllowed(ctx, p); err != nil {
		return store.Lease{}, err
	}
	if epoch <= 0 {
		return store.Lease{}, badRequest("epoch", "the write needs the lease's epoch")
	}
	t, err := s.o.Store.GetTrial(ctx, trialID)
	if err != nil {
		return store.Lease{}, notFound("no trial %s", trialID)
	}
	if t.ID != trialID {
		return store.Lease{}, notFound("no trial %s (give the whole id)", trialID)
	}
	if !ownedBy(t.LeaseOwner, p) {
		return store.Lease{}, fmt.Errorf("trial %s is leased by another worker: %w", trialID, store.ErrLeaseLost)
	}
	return store.Lease{TrialID: t.ID, RunID: t.RunID, RecordID: t.RecordID, Trial: t.Trial, Attempt: t.Attempt, Epoch: epoch, Worker: t.LeaseOwner, RetriesUsed: t.RetriesUsed}, nil
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	var req api.HeartbeatRequest
	if err := decode(w, r, maxBodyBytes, &req); err != nil {
		return err
	}
	l, err := s.leased(r.Context(), p, r.PathValue("id"), req.Epoch)
	if err != nil {
		return err
	}
	until, err := s.o.Store.Heartbeat(r.Context(), l, s.ttl(req.TTLMS))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"lease_until": until})
	return nil
}

func (s *Server) appendEvents(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	var req api.EventsRequest
	if err := decode(w, r, maxEventsBytes, &req); err != nil {
		return err
	}
	l, err := s.leased(r.Context(), p, r.PathValue("id"), req.Epoch)
	if err != nil {
		return err
	}
	for i, ev := range req.Events {
		if ev.Kind == "" {
			return badRequest(fmt.Sprintf("events[%d].kind", i), "event %d has no kind", i)
		}
		if ev.Seq < 0 {
			return badRequest(fmt.Sprintf("events[%d].seq", i), "event %d has a negative seq", i)
		}
	}
	if err := s.o.Store.AppendLeased(r.Context(), l, req.Events); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		return badRequest("events", "%v", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, p access.Principal) error {
	var req api.FinishRequest
	if err := decode(w, r, maxEventsBytes, &req); err != nil {
		return err
	}
	l, err := s.leased(r.Context(), p, r.PathValue("id"), req.Epoch)
	if err != nil {
		return err
	}
	o := req.Outcome.EngineOutcome(l.RunID)
	if o.Status != engine.TrialCompleted && o.Status != engine.TrialErrored {
		return badRequest("outcome.status", "outcome status must be %s or %s, not %q", engine.TrialCompleted, engine.TrialErrored, o.Status)
	}
	// A completed outcome must carry one result per evaluator of its run:
	// the finalizer aggregates them by position, and an outcome with more
	// or fewer would leave the run unfinishable.
	rs, err := s.runFacts(r.Context(), l.RunID)
	if err != nil {
		return err
	}
	if o.Status == engine.TrialCompleted && len(o.Evaluations) != rs.evaluators {
		return badRequest("outcome.evaluations", "a completed outcome needs one result per evaluator of the run (%d), not %d", rs.evaluators, len(o.Evaluations))
	}
	if err := saneOutcome(o); err != nil {
		return err
	}
	// The spec's retry budget is the server's to keep: a worker asking to
	// retry past it gets the attempt recorded as errored for good.
	if req.Retry && l.RetriesUsed >= rs.retries {
		req.Retry = false
	}
	c, err := runqueue.Completion(o, req.Retry)
	if err != nil {
		return badRequest("outcome", "%v", err)
	}
	if err := s.o.Store.Complete(r.Context(), l, c); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	if !req.Retry {
		// The worker's answer is out; finishing the run is the server's.
		s.finalizeIfDone(context.WithoutCancel(r.Context()), l.RunID)
	}
	return nil
}

// runFacts are what finish checks of a run, read from its stored spec once
// per run: decoding the spec (its inline records included) on every finish
// cost most of the server's time per trial.
type runFacts struct {
	evaluators, retries int
}

func (s *Server) runFacts(ctx context.Context, runID string) (runFacts, error) {
	if f, ok := s.evals.Load(runID); ok {
		return f.(runFacts), nil
	}
	run, err := s.o.Store.GetRun(ctx, runID)
	if err != nil {
		return runFacts{}, err
	}
	sp, err := run.DecodeSpec()
	if err != nil {
		return runFacts{}, fmt.Errorf("decoding the spec of run %s: %w", run.ID, err)
	}
	f := runFacts{evaluators: len(engine.EvaluatorsOf(sp)), retries: engine.LimitsOf(sp).Retries}
	s.evals.Store(runID, f)
	return f, nil
}

// saneOutcome refuses numbers no trial produces (non-finite scores, cost
// or usage out of range), which would make the run's summary unencodable
// or meaningless.
func saneOutcome(o *engine.Outcome) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) < 1e15 }
	for i, ev := range o.Evaluations {
		for j, sc := range ev.Scores {
			if sc.Name == "" || !finite(sc.Value) {
				return badRequest(fmt.Sprintf("outcome.evaluations[%d].scores[%d]", i, j), "a score needs a name and a finite value")
			}
		}
	}
	for field, v := range map[string]float64{"cost_usd": o.CostUSD, "spend_cost_usd": o.Spend.CostUSD} {
		if !finite(v) || v < 0 {
			return badRequest("outcome."+field, "%s must be a finite amount of 0 or more", field)
		}
	}
	for field, u := range map[string]int{"usage.input_tokens": o.Usage.InputTokens, "usage.output_tokens": o.Usage.OutputTokens,
		"spend_usage.input_tokens": o.Spend.Usage.InputTokens, "spend_usage.output_tokens": o.Spend.Usage.OutputTokens} {
		if u < 0 || u > 1<<40 {
			return badRequest("outcome."+field, "%s is out of range", field)
		}
	}
	return nil
}

// finalizeIfDone summarizes the run when its last trial has finished. Two
// workers finishing the last two trials at once may both get here; both
// write the same summary. A cancelled run is done once none of its trials
// is still running (cancelling ends them all at once), and is summarized
// as cancelled (runqueue.Finalize), unless it has its summary already.
func (s *Server) finalizeIfDone(ctx context.Context, runID string) {
	done, err := runqueue.Done(ctx, s.o.Store, runID)
	if err != nil || !done {
		if err != nil {
			s.log.Warn("checking whether a run is done", "run", runID, "err", err)
		}
		return
	}
	run, err := s.o.Store.GetRun(ctx, runID)
	if err != nil {
		s.log.Warn("reading a finished run", "run", runID, "err", err)
		return
	}
	if run.Status != store.RunRunning && (run.Status != store.RunCancelled || len(run.Summary) > 0) {
		return
	}
	sp, err := run.DecodeSpec()
	if err != nil {
		s.log.Error("finalizing a run", "run", runID, "err", err)
		return
	}
	sum, err := runqueue.Finalize(ctx, s.o.Store, runID, runqueue.FinalizeOptions{Evaluators: engine.EvaluatorsOf(sp)})
	if err != nil {
		s.log.Error("finalizing a run", "run", runID, "err", err)
		return
	}
	s.log.Info("run finished", "run", runID, "status", sum.Status, "trials", sum.Records*sum.Trials, "errored", sum.Errored)
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/dataset"
	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/model"
	"evals.si/planner"
	"evals.si/report"
	"evals.si/spec"
	"evals.si/store"
)

// followEvery is how often a run on a server is polled while it runs.
const followEvery = 500 * time.Millisecond

// runOnServer submits a loaded, validated spec to a server, follows it with
// the same progress lines as an embedded run and reports it the same way.
// Interrupting it detaches: the run carries on on the server.
func runOnServer(ctx context.Context, c *apiclient.Client, f *spec.File, project string, o runOutput, stdout, stderr io.Writer) error {
	logger := newLogger(stderr, o.verbose)
	if err := inlineLocalFiles(f, logger); err != nil {
		return err
	}
	run, err := c.Submit(ctx, f.Path, f.Spec, project)
	if err != nil {
		return serverErr(fmt.Errorf("submitting %s to %s: %w", f.Path, c.Base(), err))
	}
	fmt.Fprintf(stderr, "evalsi: run %s submitted to %s (project %s)\n", run.ID, c.Base(), run.Project)

	var prog *progressPrinter
	if !o.asJSON {
		prog = newProgressPrinter(stdout, o.verbose)
	}
	feed := &trialFeed{c: c, runID: run.ID, pass: planner.PassScore(f.Spec), prog: prog, logger: logger}
	last, err := c.Follow(ctx, run.ID, followEvery, func(r api.Run) { feed.update(ctx, r) })
	if err != nil {
		if ctx.Err() != nil {
			prog.done()
			fmt.Fprintf(stderr, "evalsi: detached from run %s; it continues on the server (see `evalsi runs show %s --server %s`)\n", run.ID, run.ID, c.Base())
			return &exitError{code: 130}
		}
		return serverErr(fmt.Errorf("following run %s on %s: %w", run.ID, c.Base(), err))
	}
	prog.done()
	if last.Summary == nil {
		return fmt.Errorf("run %s on %s ended %s without a summary: %s", last.ID, c.Base(), last.Status, last.Error)
	}
	junit := func(ctx context.Context, runID, path string) error {
		return writeJUnitFrom(ctx, newAPIStore(c), runID, path, junitPass(f.Spec))
	}
	return reportRun(ctx, junit, last.Summary, o, stdout, stderr)
}

// inlineLocalFiles puts into the spec what a worker cannot read from this
// machine: script_file scripts become inline scripts, and a dataset.path
// file that exists here is sent as inline records. A dataset.path that is
// not here is left for the server, which resolves it against its
// datasets_dir.
func inlineLocalFiles(f *spec.File, logger *slog.Logger) error {
	for _, m := range modelRefs(f.Spec) {
		if m.ref.ScriptFile == "" {
			continue
		}
		path := resolveLocal(f.Dir, m.ref.ScriptFile)
		s, err := model.LoadScript(path)
		if err != nil {
			return &usageError{fmt.Errorf("%v: %w", f.Errorf(m.field+".script_file", "cannot read the script %s", m.ref.ScriptFile), err)}
		}
		m.ref.Script, m.ref.ScriptFile = s, ""
		logger.Info("sending the script inline", "field", m.field+".script_file", "file", path)
	}
	if p := f.Spec.Dataset.Path; p != "" {
		path := resolveLocal(f.Dir, p)
		if _, err := os.Stat(path); err != nil {
			logger.Info("dataset.path is not on this machine: the server resolves it against its datasets_dir", "path", p)
		} else {
			recs, err := dataset.ReadFile(path)
			if err != nil {
				return &usageError{fmt.Errorf("%v: %w", f.Errorf("dataset.path", "cannot read dataset %s", p), err)}
			}
			f.Spec.Dataset.Records, f.Spec.Dataset.Path = recs, ""
			logger.Info("dataset.path read on this machine: its records are sent inline", "path", path, "records", len(recs))
		}
	}
	// What was inlined must still be a valid spec (an empty file, say).
	if err := f.Spec.Validate(); err != nil {
		return &usageError{err}
	}
	return nil
}

func resolveLocal(dir, p string) string {
	if filepath.IsAbs(p) || dir == "" {
		return p
	}
	return filepath.Join(dir, p)
}

// fieldRef is a model reference of the spec and the field it is at.
type fieldRef struct {
	field string
	ref   *spec.ModelRef
}

// modelRefs lists every model reference of the spec (each may name a
// script_file).
func modelRefs(s *spec.Spec) []fieldRef {
	refs := []fieldRef{{"target", &s.Target.ModelRef}}
	if s.Judge != nil {
		refs = append(refs, fieldRef{"judge", s.Judge})
	}
	if h := s.Harness; h != nil && h.Builtin != nil && h.Builtin.UserSimulator != nil && h.Builtin.UserSimulator.Judge != nil {
		refs = append(refs, fieldRef{"harness.builtin.user_simulator.judge", h.Builtin.UserSimulator.Judge})
	}
	return refs
}

// trialFeed turns a followed run's trials into the progress an embedded run
// shows: each trial once, when its current attempt has finished or errored
// for good (a retried attempt is replaced by a pending one, so an errored
// current attempt is final).
type trialFeed struct {
	c      *apiclient.Client
	runID  string
	pass   string
	prog   *progressPrinter
	logger *slog.Logger

	tracker *engine.Tracker
	seen    map[string]bool
}

func (t *trialFeed) update(ctx context.Context, r api.Run) {
	if t.prog == nil {
		return
	}
	total, done := 0, r.Counts[store.TrialFinished]+r.Counts[store.TrialErrored]
	for _, n := range r.Counts {
		total += n
	}
	if t.tracker == nil {
		t.tracker = engine.NewTracker(total, t.pass, nil)
		t.seen = map[string]bool{}
	}
	if done <= len(t.seen) {
		return
	}
	tl, err := t.c.Trials(ctx, t.runID)
	if err != nil {
		t.logger.Debug("reading trials for progress", "run", t.runID, "err", err)
		return
	}
	for _, tr := range tl.Trials {
		key := fmt.Sprintf("%s#%d", tr.RecordID, tr.Trial)
		if t.seen[key] || (tr.Status != store.TrialFinished && tr.Status != store.TrialErrored) {
			continue
		}
		t.seen[key] = true
		t.prog.update(t.tracker.Add(outcomeOf(tr)))
	}
}

// outcomeOf is as much of an outcome as the progress line shows.
func outcomeOf(tr api.Trial) *engine.Outcome {
	status := engine.TrialCompleted // the store's "finished"
	if tr.Status == store.TrialErrored {
		status = engine.TrialErrored
	}
	o := &engine.Outcome{RunID: tr.RunID, RecordID: tr.RecordID, Trial: tr.Trial, Attempt: tr.Attempt, Status: status,
		ErrorKind: tr.ErrorKind, Error: tr.Error, CostUSD: tr.CostUSD}
	var scores []evaluate.Score
	for _, s := range storeScores(tr.Scores) {
		scores = append(scores, evaluate.Score{Name: s.Name, Value: s.Value})
	}
	if len(scores) > 0 {
		o.Evaluations = []evaluate.EvaluatorResult{{Scores: scores}}
	}
	return o
}

// junitPass is the score that decides a JUnit testcase, as embedded mode
// picks it: task-success when the spec has it, else every 0/1 score.
func junitPass(s *spec.Spec) string {
	if slices.ContainsFunc(s.Evaluators, func(e spec.Evaluator) bool { return e.Name == "task-success" }) {
		return "task-success"
	}
	return ""
}

// writeJUnitFrom writes the JUnit report of a run read from st.
func writeJUnitFrom(ctx context.Context, st report.DetailStore, runID, path, pass string) error {
	d, err := report.LoadRunDetail(ctx, st, runID)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.WriteJUnit(f, d, pass); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

package runqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/store"
)

// Submission is a run to start: its spec as run, its records (loaded and
// capped by the submitter) and its limits.
type Submission struct {
	Name     string
	SpecPath string
	Spec     *spec.Spec
	Records  []spec.Record
	Limits   engine.Limits
	// Project and DatasetVersion are stored with the run (server mode).
	Project        string
	DatasetVersion string
}

// Submit creates the run and its pending trials, trial by trial in record
// order: the order a single worker runs them in, and the order summaries
// aggregate in. Workers read the records from the store, never from the
// submitter's files.
func Submit(ctx context.Context, st Store, sub Submission) (store.Run, error) {
	run, err := st.CreateRun(ctx, store.RunInput{
		Name: sub.Name, Spec: sub.Spec, SpecPath: sub.SpecPath,
		Project: sub.Project, MaxRunning: sub.Limits.Concurrency, DatasetVersion: sub.DatasetVersion,
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("recording the run: %w", err)
	}
	if err := Enqueue(ctx, st, run.ID, sub.Records, sub.Limits.Trials); err != nil {
		// Not left looking like a run that is starting: the store says
		// what happened to it.
		if ferr := st.FinishRun(context.WithoutCancel(ctx), run.ID, store.RunFailed, nil, "queuing its trials failed: "+err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return run, err
	}
	return run, nil
}

// Enqueue registers every (record, trial) of a run as pending, keeping the
// ones that exist (resume of a run recorded before every trial was).
func Enqueue(ctx context.Context, st Store, runID string, records []spec.Record, trials int) error {
	in := make([]store.TrialInput, 0, len(records)*max(trials, 1))
	for trial := range max(trials, 1) {
		for _, r := range records {
			b, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encoding record %q: %w", r.ID, err)
			}
			in = append(in, store.TrialInput{RunID: runID, RecordID: r.ID, Trial: trial, Record: b})
		}
	}
	if err := st.Enqueue(ctx, runID, in); err != nil {
		return fmt.Errorf("queuing the trials of run %s: %w", runID, err)
	}
	return nil
}

// Outcomes reads a run's finished trials (their current attempts) back as
// engine outcomes, in enqueue order, with their per-evaluator results
// exactly as recorded. nEvals is how many evaluators the run has: a
// finished trial with another number was recorded by another spec.
func Outcomes(ctx context.Context, st Store, runID string, nEvals int) ([]*engine.Outcome, error) {
	return outcomesOf(ctx, st, runID, nEvals, false)
}

// outcomesOf is Outcomes; with unfinished, the trials without a result
// are included as errored outcomes of kind store.
func outcomesOf(ctx context.Context, st Store, runID string, nEvals int, unfinished bool) ([]*engine.Outcome, error) {
	trials, err := st.ListTrials(ctx, runID)
	if err != nil {
		return nil, err
	}
	stored, err := st.Evaluations(ctx, runID)
	if err != nil {
		return nil, err
	}
	var out []*engine.Outcome
	for _, t := range trials {
		if t.Status != store.TrialFinished && t.Status != store.TrialErrored {
			if unfinished {
				out = append(out, &engine.Outcome{RunID: runID, RecordID: t.RecordID, Category: recordCategory(t.Record), Trial: t.Trial, Attempt: max(t.Attempt-1, 0),
					Status: engine.TrialErrored, ErrorKind: engine.ErrorKindStore, Error: "the trial's result could not be recorded in the store",
					Spend: engine.Spend{Usage: t.SpendUsage, CostUSD: t.SpendCostUSD}})
			}
			continue
		}
		o := &engine.Outcome{
			// The store counts attempts from 1, the engine from 0.
			RunID: runID, RecordID: t.RecordID, Category: recordCategory(t.Record), Trial: t.Trial, Attempt: max(t.Attempt-1, 0),
			Status: engine.TrialCompleted, ErrorKind: t.ErrorKind, Error: t.Error, Output: t.Output,
			Usage: t.Usage, CostUSD: t.CostUSD, Isolation: t.Isolation, Started: t.StartedAt, Finished: t.FinishedAt,
			Spend: engine.Spend{Usage: t.SpendUsage, CostUSD: t.SpendCostUSD},
		}
		if t.Status == store.TrialErrored {
			o.Status = engine.TrialErrored
			out = append(out, o)
			continue
		}
		raw, ok := stored[t.ID]
		if !ok {
			return nil, fmt.Errorf("run %s: finished trial %s (record %q, trial %d) has no stored evaluator results; it was recorded by an evalsi without resume support", runID, t.ID, t.RecordID, t.Trial)
		}
		if err := json.Unmarshal(raw, &o.Evaluations); err != nil {
			return nil, fmt.Errorf("run %s: decoding evaluator results of trial %s: %w", runID, t.ID, err)
		}
		if len(o.Evaluations) != nEvals {
			return nil, fmt.Errorf("run %s: trial %s has %d evaluator results, the spec %d evaluators", runID, t.ID, len(o.Evaluations), nEvals)
		}
		out = append(out, o)
	}
	return out, nil
}

// recordCategory is a stored record's metadata.category when it is a
// string (benchmark importers set it), else "".
func recordCategory(rec json.RawMessage) string {
	var r struct {
		Metadata struct {
			Category json.RawMessage `json:"category"`
		} `json:"metadata"`
	}
	var c string
	if len(rec) == 0 || json.Unmarshal(rec, &r) != nil || json.Unmarshal(r.Metadata.Category, &c) != nil {
		return ""
	}
	return c
}

// FinalizeOptions say how a run ends.
type FinalizeOptions struct {
	// Evaluators are the evaluator configs in effect (the spec's or the
	// defaults), in the order of each outcome's evaluations.
	Evaluators []spec.Evaluator
	// Interrupted: the run stopped on request; unfinished trials wait for
	// resume.
	Interrupted bool
	// Elapsed, when set, is the run's wall time (default: since created).
	Elapsed time.Duration
	// Unrecorded, when set, is why a trial's result could not be recorded
	// (the first such error the worker saw).
	Unrecorded error
	// Stopped, when set, is why the worker stopped starting trials (the
	// run's budget, engine.Budget): its pending trials were not started and
	// wait for a resume; the run ends interrupted, saying so.
	Stopped string
}

// Finalize summarizes a run from its stored trials and records its end:
// completed when every trial finished; interrupted on request; failed when
// trials are left unfinished otherwise (their results could not be
// recorded: resume runs them again); cancelled when it was cancelled
// (store CancelRun). The summary is the same whichever workers ran the
// trials, in whatever order.
func Finalize(ctx context.Context, st Store, runID string, o FinalizeOptions) (*engine.Summary, error) {
	run, err := st.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	s, err := run.DecodeSpec()
	if err != nil {
		return nil, err
	}
	counts, err := st.CountTrials(ctx, runID)
	if err != nil {
		return nil, err
	}
	outcomes, err := Outcomes(ctx, st, runID, len(o.Evaluators))
	if err != nil {
		return nil, err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	trials := max(s.Trials, 1)
	nRecords := total / trials
	status, errMsg, notStarted := engine.StatusCompleted, "", 0
	unfinished := counts[store.TrialPending] + counts[store.TrialRunning]
	switch {
	case run.Status == store.RunCancelled:
		// Its unfinished trials were cancelled with it: they count as
		// neither passed, failed nor errored, and the scores are those of
		// the trials that finished before.
		status = store.RunCancelled
	case o.Stopped != "" && counts[store.TrialPending] > 0 && counts[store.TrialRunning] == 0:
		// Interrupted, not failed: nothing was lost, the trials the budget
		// held back are pending and a resume with a higher cap runs them.
		// Before o.Interrupted: a Ctrl-C while the last trials finished
		// must not lose why the run stopped.
		status = engine.StatusInterrupted
		notStarted = counts[store.TrialPending]
		errMsg = engine.StoppedLabel(o.Stopped, notStarted) + "; " + engine.ResumeHint(o.Stopped, runID)
	case o.Interrupted:
		status = engine.StatusInterrupted
	case unfinished > 0:
		// The worker is gone and these trials have no recorded result: they
		// count as errored (kind store) in this summary, so the run's means
		// are not silently taken over fewer trials, and the run is failed.
		status = engine.StatusFailed
		errMsg = fmt.Sprintf("%d trial(s) could not be recorded in the store; resume the run to run them again", unfinished)
		if o.Unrecorded != nil {
			errMsg += fmt.Sprintf(" (first: %v)", o.Unrecorded)
		}
		if outcomes, err = outcomesOf(ctx, st, runID, len(o.Evaluators), true); err != nil {
			return nil, err
		}
	}
	sum := engine.Summarize(runID, run.Name, status, nRecords, trials, outcomes, o.Evaluators)
	if notStarted > 0 {
		sum.NotStarted, sum.Stopped = notStarted, o.Stopped
	}
	sum.Elapsed = o.Elapsed.Seconds()
	if o.Elapsed == 0 {
		sum.Elapsed = time.Since(run.CreatedAt).Seconds()
	}
	b, err := json.Marshal(sum)
	if err != nil {
		// Scores no trial should have (a non-finite mean): the run ends
		// failed, saying why, rather than staying running for ever.
		msg := fmt.Sprintf("the run's summary cannot be recorded: %v", err)
		if ferr := st.FinishRun(context.WithoutCancel(ctx), runID, engine.StatusFailed, nil, msg); ferr != nil {
			return nil, errors.Join(fmt.Errorf("encoding the summary of run %s: %w", runID, err), ferr)
		}
		sum.Status = engine.StatusFailed
		return sum, fmt.Errorf("encoding the summary of run %s: %w", runID, err)
	}
	if err := st.FinishRun(context.WithoutCancel(ctx), runID, status, b, errMsg); err != nil {
		return sum, fmt.Errorf("recording the end of run %s: %w", runID, err)
	}
	return sum, nil
}

// Done reports whether every trial of the run has finished. A run with no
// trials yet is not done: it is being submitted (its run row is written
// before its trials), and finalizing it then would strand its trials.
func Done(ctx context.Context, st Store, runID string) (bool, error) {
	counts, err := st.CountTrials(ctx, runID)
	if err != nil {
		return false, err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	return total > 0 && counts[store.TrialPending]+counts[store.TrialRunning] == 0, nil
}

// Reopen prepares an interrupted or killed run for resume: every attempt
// left running (its process is gone) is taken back as lost and queued
// again, trials never registered are queued, and the run is running again.
// The caller must know no worker still runs the run's trials.
func Reopen(ctx context.Context, st Store, runID string, records []spec.Record, trials int) error {
	if _, err := st.Requeue(ctx, store.RequeueRequest{RunID: runID, All: true}); err != nil {
		return fmt.Errorf("taking back the run's unfinished trials: %w", err)
	}
	if err := Enqueue(ctx, st, runID, records, trials); err != nil {
		return err
	}
	if _, err := st.ResumeRun(ctx, runID); err != nil {
		return err
	}
	return nil
}

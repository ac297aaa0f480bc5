package regress

import (
	"context"
	"errors"

	"evals.si/spec"
	"evals.si/store"
)

// ErrNoBaseline is returned by Shadow when neither a baseline run is named
// nor the candidate's dataset is dataset: {run}.
var ErrNoBaseline = errors.New("shadow needs a baseline run: pass --baseline RUN or give the candidate dataset: {run: {run_id: RUN}}")

// BaselineOf is the baseline a shadow replay of candidate compares with:
// baseline when given, else the run the candidate's dataset: {run} names.
func BaselineOf(candidate *spec.Spec, baseline string) (string, error) {
	if baseline != "" {
		return baseline, nil
	}
	if d := candidate.Dataset.Run; d != nil && d.RunID != "" {
		return d.RunID, nil
	}
	return "", ErrNoBaseline
}

// Shadow turns candidate into a shadow replay of run baselineID (id or
// unique prefix) and returns that run: the candidate's dataset becomes the
// baseline's recorded inputs (every record it ran, errored or not, as it
// stored them, under the same ids), and its evaluators and judge become the
// baseline's, so that the two runs are scored alike and compare record by
// record. Everything else (target, harness, environment, trials, limits) is
// the candidate's: that is what is being tried.
func Shadow(ctx context.Context, st RunReader, candidate *spec.Spec, baselineID string) (store.Run, error) {
	run, recs, err := RecordedInputs(ctx, st, baselineID)
	if err != nil {
		return store.Run{}, err
	}
	base, err := run.DecodeSpec()
	if err != nil {
		return store.Run{}, err
	}
	candidate.Dataset = spec.Dataset{Records: recs}
	candidate.Evaluators = base.Evaluators
	if base.Judge != nil {
		candidate.Judge = base.Judge
	}
	return run, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"evals.si/embedded"
	"evals.si/regress"
	"evals.si/spec"
	"evals.si/store"
)

// cmdShadow is `evalsi shadow -f candidate.yaml [--baseline RUN]`: run the
// candidate over the baseline run's recorded inputs, scored with the
// baseline's evaluators, then print `evalsi runs compare BASELINE SHADOW`.
// Progress goes to stderr, so stdout is the comparison alone (one JSON
// object with --json). Exit codes are those of runs compare, or 3 when a
// trial of the shadow run errored.
func cmdShadow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi shadow", stderr)
	file := fs.String("f", "", "the candidate run spec (YAML)")
	baseline := fs.String("baseline", "", "the baseline run (default: the run the candidate's dataset: {run} names)")
	storePath := fs.String("store", "", "store database path (default: the user's data directory)")
	asJSON := fs.Bool("json", false, "print the comparison as one JSON object")
	by := fs.String("by", "", "the score that decides a record's verdict (as runs compare --by)")
	all := fs.Bool("all", false, "list unchanged records too")
	failOnRegression := fs.Bool("fail-on-regression", false, "exit 1 when any record regressed (for CI)")
	verbose := fs.Bool("v", false, "verbose logs on stderr")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err}
	}
	switch {
	case *file == "" && len(pos) == 1:
		*file = pos[0]
	case *file == "" || len(pos) > 0:
		return usagef("shadow needs one candidate spec: -f CANDIDATE")
	}
	f, err := spec.Load(*file)
	if err != nil {
		return &usageError{err}
	}
	baseID, err := regress.BaselineOf(f.Spec, *baseline)
	if err != nil {
		return &usageError{err}
	}
	app, err := embedded.Open(ctx, embedded.Options{StorePath: *storePath, Logger: newLogger(stderr, *verbose)})
	if err != nil {
		return err
	}
	defer app.Close()
	base, err := regress.Shadow(ctx, app.Store(), f.Spec, baseID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return &usageError{err}
		}
		return fmt.Errorf("shadow of run %s: %w", baseID, err)
	}
	if err := f.Spec.Validate(); err != nil {
		return &usageError{fmt.Errorf("the candidate with the baseline's records and evaluators: %w", err)}
	}
	var prog *progressPrinter
	if !*asJSON {
		prog = newProgressPrinter(stderr)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: prog.update})
	if err != nil {
		var se embedded.SpecError
		if errors.As(err, &se) {
			return &usageError{err}
		}
		return err
	}
	prog.done()
	if !*asJSON {
		fmt.Fprintf(stderr, "shadow run %s of %s over the records of baseline %s\n", sum.RunID, *file, base.ID)
	}
	compareArgs := []string{base.ID, sum.RunID}
	if *by != "" {
		compareArgs = append(compareArgs, "--by", *by)
	}
	if *all {
		compareArgs = append(compareArgs, "--all")
	}
	if *failOnRegression {
		compareArgs = append(compareArgs, "--fail-on-regression")
	}
	err = cmdRunsCompare(ctx, &runsFlags{fixed: localRuns{app.Store()}}, compareArgs, *asJSON, stdout, stderr)
	// As with run, errored trials (3) win over a regression (1): a verdict
	// over errored trials is not trustworthy.
	var ee *exitError
	if sum.Errored > 0 && (err == nil || errors.As(err, &ee)) {
		fmt.Fprintf(stderr, "evalsi: %d trial(s) of shadow run %s errored (see `evalsi runs show %s`)\n", sum.Errored, sum.RunID, sum.RunID)
		return &exitError{code: exitErrored}
	}
	return err
}

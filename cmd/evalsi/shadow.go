package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"evals.si/embedded"
	"evals.si/regress"
	"evals.si/spec"
	"evals.si/store"
)

// shadowFlags are `evalsi shadow`'s.
type shadowFlags struct {
	file, baseline, storePath string
	verbose                   bool
	compare                   compareOptions
}

func newShadowCmd(stdout, stderr io.Writer) *cobra.Command {
	sf := &shadowFlags{}
	cmd := &cobra.Command{
		Use:   "shadow [-f] CANDIDATE [flags]",
		Short: "Replay a baseline run's recorded inputs against a candidate and compare",
		Long: `Run the candidate spec over the baseline run's recorded inputs, scored with
the baseline's evaluators, then print evalsi runs compare BASELINE SHADOW.
Progress goes to stderr, so stdout is the comparison alone (one JSON object
with --json). Exit codes are those of runs compare, or 3 when a trial of the
shadow run errored.`,
		Example: "  evalsi shadow -f candidate.yaml --baseline r-20261129-085301-ab12cd --fail-on-regression",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 || len(args) == 1 && sf.file != "" || len(args) == 0 && sf.file == "" {
				return usagef("shadow needs one candidate spec: -f CANDIDATE; see `evalsi shadow --help`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if sf.file == "" {
				sf.file = args[0]
			}
			return cmdShadow(cmd.Context(), sf, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&sf.file, "file", "f", "", "the candidate run spec (YAML)")
	fs.StringVar(&sf.baseline, "baseline", "", "the baseline run (default: the run the candidate's dataset: {run} names)")
	addStoreFlag(fs, &sf.storePath)
	fs.BoolVar(&sf.compare.asJSON, "json", false, "print the comparison as one JSON object")
	fs.StringVar(&sf.compare.by, "by", "", "the score that decides a record's verdict (as runs compare --by)")
	fs.BoolVar(&sf.compare.all, "all", false, "list unchanged records too")
	fs.BoolVar(&sf.compare.failOnRegression, "fail-on-regression", false, "exit 1 when any record regressed (for CI)")
	fs.BoolVarP(&sf.verbose, "verbose", "v", false, "one progress line per finished trial even on a terminal, and debug logs on stderr")
	return cmd
}

// cmdShadow is `evalsi shadow -f candidate.yaml [--baseline RUN]`.
func cmdShadow(ctx context.Context, sf *shadowFlags, stdout, stderr io.Writer) error {
	// The baseline is a run in an existing store.
	if err := storeMustExist(sf.storePath); err != nil {
		return err
	}
	f, err := spec.Load(sf.file)
	if err != nil {
		return &usageError{err}
	}
	baseID, err := regress.BaselineOf(f.Spec, sf.baseline)
	if err != nil {
		return &usageError{err}
	}
	logger := newLogger(stderr, sf.verbose)
	app, err := embedded.Open(ctx, embedded.Options{StorePath: sf.storePath, Logger: logger})
	if err != nil {
		return err
	}
	defer closeApp(app, logger)
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
	if !sf.compare.asJSON {
		prog = newProgressPrinter(stderr, sf.verbose)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: prog.update, OnRunning: prog.update})
	if err != nil {
		var se embedded.SpecError
		if errors.As(err, &se) {
			return &usageError{err}
		}
		return err
	}
	prog.done()
	if !sf.compare.asJSON {
		fmt.Fprintf(stderr, "shadow run %s of %s over the records of baseline %s\n", sum.RunID, sf.file, base.ID)
	}
	err = runsCompare(ctx, &runsFlags{fixed: localRuns{app.Store()}}, base.ID, sum.RunID, sf.compare, stdout, stderr)
	// As with run, errored trials (3) win over a regression (1): a verdict
	// over errored trials is not trustworthy.
	var ee *exitError
	if sum.Errored > 0 && (err == nil || errors.As(err, &ee)) {
		fmt.Fprintf(stderr, "evalsi: %d trial(s) of shadow run %s errored (see `evalsi runs show %s`)\n", sum.Errored, sum.RunID, sum.RunID)
		return &exitError{code: exitErrored}
	}
	return err
}

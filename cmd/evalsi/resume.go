package main

import (
	"context"
	"errors"
	"io"

	"evals.si/embedded"
)

// resumeRun continues an interrupted or killed run (evalsi run --resume RUN,
// evalsi runs resume RUN) and reports it like a fresh run: same output,
// same exit codes.
func resumeRun(ctx context.Context, runID string, o runOutput, stdout, stderr io.Writer) error {
	app, err := embedded.Open(ctx, embedded.Options{StorePath: o.storePath, Logger: newLogger(stderr, o.verbose)})
	if err != nil {
		return err
	}
	defer app.Close()
	return resumeWith(ctx, app, runID, o, stdout, stderr)
}

func resumeWith(ctx context.Context, app *embedded.App, runID string, o runOutput, stdout, stderr io.Writer) error {
	var prog *progressPrinter
	if !o.asJSON {
		prog = newProgressPrinter(stdout)
	}
	sum, err := app.Resume(ctx, runID, embedded.RunOptions{OnProgress: prog.update})
	if err != nil {
		var se embedded.SpecError
		var re embedded.ResumeError
		if errors.As(err, &se) || errors.As(err, &re) {
			return &usageError{err}
		}
		return err
	}
	prog.done()
	return reportRun(ctx, app.WriteJUnit, sum, o, stdout, stderr)
}

// cmdRunsResume is `evalsi runs resume RUN`, on the app `runs` opened.
func cmdRunsResume(ctx context.Context, app *embedded.App, args []string, asJSON bool, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usagef("runs resume needs one RUN id (or a unique prefix)")
	}
	return resumeWith(ctx, app, args[0], runOutput{asJSON: asJSON}, stdout, stderr)
}

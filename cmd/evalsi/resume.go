package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"evals.si/embedded"
)

// resumeRun continues an interrupted or killed run (evalsi run --resume RUN,
// evalsi runs resume RUN) and reports it like a fresh run: same output,
// same exit codes.
func resumeRun(ctx context.Context, runID string, o runOutput, stdout, stderr io.Writer) error {
	// A run to resume is in an existing store; do not make an empty one.
	if err := storeMustExist(o.storePath); err != nil {
		return err
	}
	if err := validCost(o.maxCost); err != nil {
		return err
	}
	if o.maxTokens < 0 {
		return usagef("--max-tokens %d: give a positive number of tokens, or leave it out for no cap", o.maxTokens)
	}
	logger := newLogger(stderr, o.verbose)
	app, err := embedded.Open(ctx, embedded.Options{StorePath: o.storePath, Logger: logger})
	if err != nil {
		return err
	}
	defer closeApp(app, logger)
	return resumeWith(ctx, app, runID, o, stdout, stderr)
}

func resumeWith(ctx context.Context, app *embedded.App, runID string, o runOutput, stdout, stderr io.Writer) error {
	var prog *progressPrinter
	if !o.asJSON {
		prog = newProgressPrinter(stdout, o.verbose)
	}
	sum, err := app.Resume(ctx, runID, embedded.RunOptions{OnProgress: prog.update, OnRunning: prog.update, MaxCostUSD: o.maxCost, MaxTokens: o.maxTokens})
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

// newRunsResumeCmd is `evalsi runs resume RUN`, the same as
// `evalsi run --resume RUN`.
func newRunsResumeCmd(stdout, stderr io.Writer) *cobra.Command {
	o := runOutput{failUnder: thresholds{}}
	var server string
	cmd := &cobra.Command{
		Use:   "resume RUN [flags]",
		Short: "Continue an interrupted or killed run",
		Long: `Continue an interrupted or killed run (id or unique prefix) from the trials it
left unfinished, with the spec it was started with, and report it as a fresh
run: same output, same exit codes. The same as evalsi run --resume RUN.`,
		Args: exactArgs(1, "runs resume needs one RUN id (or a unique prefix)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if server != "" {
				return usagef("runs resume with --server: a server reopens runs its workers left by itself; follow one with `evalsi runs show RUN --server URL`")
			}
			return resumeRun(cmd.Context(), args[0], o, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.BoolVar(&o.asJSON, "json", false, "print exactly one JSON object on stdout (the summary), and no progress")
	fs.Var(o.failUnder, "fail-under", "exit 1 when the mean of score NAME is below VALUE (repeatable)")
	fs.StringVar(&o.junit, "junit", "", "also write a JUnit XML report to `PATH`")
	fs.Float64Var(&o.maxCost, "max-cost", 0, "stop starting trials once the run has spent `USD` in all, replacing for this resume the cap it ran under (a later plain resume has the cap the run started with)")
	fs.IntVar(&o.maxTokens, "max-tokens", 0, "stop starting trials once the run has used `N` tokens in all, replacing for this resume the cap it ran under")
	addStoreFlag(fs, &o.storePath)
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "one progress line per finished trial even on a terminal, and debug logs on stderr")
	fs.StringVar(&server, "server", "", "refused: a server resumes its runs by itself")
	_ = fs.MarkHidden("server")
	return cmd
}

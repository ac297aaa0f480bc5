package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"evals.si/embedded"
	"evals.si/report"
	"evals.si/store"
)

func cmdRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("runs needs a subcommand: list, show RUN")
	}
	fs := newFlagSet("evalsi runs "+args[0], stderr)
	storePath := fs.String("store", "", "store database path (default: the user's data directory)")
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "list at most this many runs")
	if err := fs.Parse(args[1:]); err != nil {
		return &usageError{err}
	}
	app, err := embedded.Open(ctx, embedded.Options{StorePath: *storePath, Logger: newLogger(stderr, false)})
	if err != nil {
		return err
	}
	defer app.Close()
	st := app.Store()
	switch args[0] {
	case "list":
		runs, err := st.ListRuns(ctx, store.ListRunsOptions{Limit: *limit})
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(runs)
		}
		return report.WriteRuns(stdout, runs)
	case "show":
		if fs.NArg() != 1 {
			return usagef("runs show needs one RUN id (or a unique prefix)")
		}
		d, err := app.RunDetail(ctx, fs.Arg(0))
		if err != nil {
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
				return &usageError{err}
			}
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(d)
		}
		return report.WriteRunDetail(stdout, d)
	case "resume":
		return cmdRunsResume(ctx, app, fs.Args(), *asJSON, stdout, stderr)
	case "compare":
		return cmdRunsCompare(ctx, app, fs.Args(), *asJSON, stdout, stderr)
	case "export":
		return cmdRunsExport(ctx, app, fs.Args(), stdout, stderr)
	default:
		return usagef("unknown runs subcommand %q (list, show, resume, compare, export)", args[0])
	}
}

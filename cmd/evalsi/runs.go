package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"

	"evals.si/embedded"
	"evals.si/report"
	"evals.si/store"
)

// runsReader is what `evalsi runs` reads: the local store, or a server's
// API with --server.
type runsReader interface {
	report.DetailStore
	ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error)
	// ExportJSONL and ExportParquet write the run's `runs export`.
	ExportJSONL(ctx context.Context, w io.Writer, runID string) error
	ExportParquet(ctx context.Context, w io.Writer, runID string) error
}

// localRuns reads the local store.
type localRuns struct{ *store.Store }

func (l localRuns) ExportJSONL(ctx context.Context, w io.Writer, runID string) error {
	return report.ExportJSONL(ctx, w, l.Store, runID)
}

func (l localRuns) ExportParquet(ctx context.Context, w io.Writer, runID string) error {
	return report.ExportParquet(ctx, w, l.Store, runID)
}

// runsFlags say where `runs` reads; subcommands that take flags after
// their arguments register them again, sharing the values.
type runsFlags struct {
	storePath, server string
	// fixed, when set, is the reader to use, and --store and --server are
	// not flags (shadow compares in the store it just ran in).
	fixed runsReader
}

func (rf *runsFlags) register(fs *flag.FlagSet) {
	if rf.fixed != nil {
		return
	}
	fs.StringVar(&rf.storePath, "store", rf.storePath, "store database path (default: the user's data directory)")
	fs.StringVar(&rf.server, "server", rf.server, serverUsage)
}

// open returns the reader and what closes it.
func (rf *runsFlags) open(ctx context.Context, stderr io.Writer) (runsReader, func(), error) {
	if rf.fixed != nil {
		return rf.fixed, func() {}, nil
	}
	if rf.server != "" {
		if rf.storePath != "" {
			return nil, nil, usagef("--store cannot be used with --server (it names this machine's store)")
		}
		c, err := dialServer(rf.server)
		if err != nil {
			return nil, nil, err
		}
		return newAPIStore(c), func() {}, nil
	}
	app, err := embedded.Open(ctx, embedded.Options{StorePath: rf.storePath, Logger: newLogger(stderr, false)})
	if err != nil {
		return nil, nil, err
	}
	return localRuns{app.Store()}, func() { app.Close() }, nil
}

func cmdRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("runs needs a subcommand: list, show RUN")
	}
	fs := newFlagSet("evalsi runs "+args[0], stderr)
	rf := &runsFlags{}
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "list at most this many runs")
	if err := fs.Parse(args[1:]); err != nil {
		return &usageError{err}
	}
	pos := fs.Args()
	switch args[0] {
	case "list", "show", "resume", "cancel":
		// These take their flags after the run too (compare and export
		// parse their own).
		var err error
		if pos, err = parseInterleaved(fs, pos); err != nil {
			return &usageError{err}
		}
	}
	switch args[0] {
	case "list", "show":
	case "resume":
		if rf.server != "" {
			return usagef("runs resume with --server: a server reopens runs its workers left by itself; follow one with `evalsi runs show RUN --server URL`")
		}
		app, err := embedded.Open(ctx, embedded.Options{StorePath: rf.storePath, Logger: newLogger(stderr, false)})
		if err != nil {
			return err
		}
		defer app.Close()
		return cmdRunsResume(ctx, app, pos, *asJSON, stdout, stderr)
	case "cancel":
		return cmdRunsCancel(ctx, rf, pos, *asJSON, stdout)
	case "compare":
		return cmdRunsCompare(ctx, rf, fs.Args(), *asJSON, stdout, stderr)
	case "export":
		return cmdRunsExport(ctx, rf, fs.Args(), stdout, stderr)
	default:
		return usagef("unknown runs subcommand %q (list, show, resume, cancel, compare, export)", args[0])
	}
	st, closeStore, err := rf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	switch args[0] {
	case "list":
		if len(pos) > 0 {
			return usagef("runs list takes no arguments, got %q", pos)
		}
		runs, err := st.ListRuns(ctx, store.ListRunsOptions{Limit: *limit})
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(runs)
		}
		return report.WriteRuns(stdout, runs)
	default: // show
		if len(pos) != 1 {
			return usagef("runs show needs one RUN id (or a unique prefix)")
		}
		d, err := report.LoadRunDetail(ctx, st, pos[0])
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
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"evals.si/embedded"
	"evals.si/report"
	"evals.si/store"
)

// runsReader is what `evalsi runs` reads: the local store, or a server's
// API with --server.
type runsReader interface {
	report.DetailStore
	ListRuns(ctx context.Context, opt store.ListRunsOptions) ([]store.Run, error)
	// CountTrials counts a run's trials (current attempts) by status.
	CountTrials(ctx context.Context, runID string) (map[string]int, error)
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

// runsFlags say where `runs` reads.
type runsFlags struct {
	storePath, server string
	// fixed, when set, is the reader to use, and --store and --server are
	// not flags (shadow compares in the store it just ran in).
	fixed runsReader
}

func (rf *runsFlags) register(fs *pflag.FlagSet) {
	if rf.fixed != nil {
		return
	}
	addStoreFlag(fs, &rf.storePath)
	fs.StringVar(&rf.server, "server", "", serverUsage)
}

// open returns the reader and what closes it. The commands that open it
// only read, so a --store that names no file is refused.
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
	if err := storeMustExist(rf.storePath); err != nil {
		return nil, nil, err
	}
	app, err := embedded.Open(ctx, embedded.Options{StorePath: rf.storePath, Logger: newLogger(stderr, false)})
	if err != nil {
		return nil, nil, err
	}
	return localRuns{app.Store()}, func() { app.Close() }, nil
}

// notFoundIsUsage makes a run that is not there (or a prefix of several) a
// usage error: the user named it.
func notFoundIsUsage(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
		return &usageError{err}
	}
	return err
}

func newRunsCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, compare, export, resume and cancel stored runs",
		Long: `Read the runs in the local store (--store, default: the user's data
directory), or on a server with --server URL.`,
		Args: subcommandArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(
		newRunsListCmd(stdout, stderr),
		newRunsShowCmd(stdout, stderr),
		newRunsCompareCmd(stdout, stderr),
		newRunsExportCmd(stdout, stderr),
		newRunsResumeCmd(stdout, stderr),
		newRunsCancelCmd(stdout, stderr),
	)
	return cmd
}

func newRunsListCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runsFlags{}
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List runs, newest first",
		Long: `List runs, newest first: id, name, target (model or agent kind), status as
a person reads it ("completed with errors" when trials errored), trials done
of records × trials, and a score summary ("task-success=0.667 (4/6)").

With --json, an array ([] when there are none) of objects with the keys of
evalsi run --json (run_id, status, records, trials, errored, scores,
cost_usd, tokens, ...) plus name, status_label, target, trials_total,
trials_done, created_at, finished_at.`,
		Aliases: []string{"ls"},
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, closeStore, err := rf.open(ctx, stderr)
			if err != nil {
				return err
			}
			defer closeStore()
			runs, err := st.ListRuns(ctx, store.ListRunsOptions{Limit: limit})
			if err != nil {
				return err
			}
			rows := make([]report.RunRow, 0, len(runs))
			for _, r := range runs {
				counts, err := st.CountTrials(ctx, r.ID)
				if err != nil {
					return err
				}
				rows = append(rows, report.RunRow{Run: r, Counts: counts})
			}
			if asJSON {
				js, err := report.RunsJSON(rows)
				if err != nil {
					return err
				}
				return json.NewEncoder(stdout).Encode(js)
			}
			return report.WriteRuns(stdout, rows)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&asJSON, "json", false, "print a JSON array of runs")
	fs.IntVar(&limit, "limit", 50, "list at most this many runs")
	rf.register(fs)
	return cmd
}

func newRunsShowCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runsFlags{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show RUN [flags]",
		Short: "Show a run: each trial's status, scores, trajectory, error and checker output",
		Long: `Show a run (id or unique prefix): its status, target and scores, then per
trial its status, scores and trajectory summary (steps, tool calls, tokens,
cost, time), and for each trial that errored or was checked the error whole
and the checker's verdict and output.

With --json, one object with the keys of evalsi run --json plus those of
runs list --json, and "trial_results": one object per trial (trial_id, record_id,
trial, attempt, status, passed, error_kind, error, scores, usage, tokens,
cost_usd, duration_seconds, and trajectory: steps, model_calls, tool_calls,
policy_events, checker with its whole output, errors).`,
		Args: exactArgs(1, "runs show needs one RUN id (or a unique prefix)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, closeStore, err := rf.open(ctx, stderr)
			if err != nil {
				return err
			}
			defer closeStore()
			d, err := report.LoadRunDetail(ctx, st, args[0])
			if err != nil {
				return notFoundIsUsage(err)
			}
			// A server's API does not list a trial's events here; the
			// local store does.
			if er, ok := st.(report.EventReader); ok {
				if err := report.LoadTrajectories(ctx, er, &d); err != nil {
					return err
				}
			}
			if asJSON {
				js, err := report.RunDetailJSON(d)
				if err != nil {
					return err
				}
				return json.NewEncoder(stdout).Encode(js)
			}
			return report.WriteRunDetail(stdout, d)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&asJSON, "json", false, "print the run and its trials as one JSON object")
	rf.register(fs)
	return cmd
}

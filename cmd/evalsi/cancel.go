package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"evals.si/api"
)

func newRunsCancelCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runsFlags{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel RUN --server URL [flags]",
		Short: "Cancel a run on a server",
		Long: `Cancel a run (id or unique prefix) on a server: its unfinished trials are
cancelled. A local run stops with Ctrl-C instead; evalsi runs resume RUN goes
on with it.`,
		Args: exactArgs(1, "runs cancel needs one RUN id (or a unique prefix)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdRunsCancel(cmd.Context(), rf, args, asJSON, stdout)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&asJSON, "json", false, "print the cancelled run as the server's JSON")
	rf.register(fs)
	return cmd
}

// cmdRunsCancel is `evalsi runs cancel RUN --server URL`: the server stops
// the run (POST /v1/runs/{id}/cancel). It is the server's only: a local
// run stops with Ctrl-C, and resume goes on with it.
func cmdRunsCancel(ctx context.Context, rf *runsFlags, args []string, asJSON bool, stdout io.Writer) error {
	if rf.server == "" {
		return usagef("runs cancel cancels a run on a server: give --server URL (a local run stops with Ctrl-C; `evalsi runs resume RUN` goes on with it)")
	}
	if rf.storePath != "" {
		return usagef("--store cannot be used with --server (it names this machine's store)")
	}
	if len(args) != 1 {
		return usagef("runs cancel needs one RUN id (or a unique prefix)")
	}
	c, err := dialServer(rf.server)
	if err != nil {
		return err
	}
	before, err := c.Run(ctx, args[0])
	if err != nil {
		return serverErr(fmt.Errorf("reading run %s on %s: %w", args[0], c.Base(), err))
	}
	run, err := c.Cancel(ctx, before.ID)
	if err != nil {
		return serverErr(fmt.Errorf("cancelling run %s on %s: %w", before.ID, c.Base(), err))
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(run)
	}
	if before.Status != api.RunRunning {
		_, err := fmt.Fprintf(stdout, "run %s had already ended %s; nothing to cancel\n", run.ID, run.Status)
		return err
	}
	_, err = fmt.Fprintf(stdout, "run %s %s (trials: %s)\n", run.ID, run.Status, trialCounts(run.Counts))
	return err
}

// trialCounts writes trial counts as "2 cancelled, 1 finished", by status.
func trialCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, status := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[status], status))
	}
	return strings.Join(parts, ", ")
}

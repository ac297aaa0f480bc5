package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"evals.si/report"
)

// compareOptions are `runs compare`'s (and shadow's) flags.
type compareOptions struct {
	asJSON, all, failOnRegression bool
	by                            string
}

func newRunsCompareCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runsFlags{}
	o := compareOptions{}
	cmd := &cobra.Command{
		Use:   "compare BASE HEAD [flags]",
		Short: "Compare two runs record by record",
		Long: `Compare run HEAD against run BASE (ids or unique prefixes) record by record:
each record's verdict (improved, regressed, unchanged, incomparable) by the
score --by, and the change of every score's mean.`,
		Example: `  evalsi runs compare r-base r-head --fail-on-regression
  evalsi runs compare r-base r-head --json --by exact-match`,
		Args: exactArgsf(2, "runs compare needs two runs: BASE HEAD (ids or unique prefixes), got %d"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runsCompare(cmd.Context(), rf, args[0], args[1], o, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.asJSON, "json", false, "print the comparison as one JSON object")
	fs.StringVar(&o.by, "by", report.DefaultPassScore, "the score that decides a record's verdict when both runs have it")
	fs.BoolVar(&o.all, "all", false, "list unchanged records too")
	fs.BoolVar(&o.failOnRegression, "fail-on-regression", false, "exit 1 when any record regressed (for CI)")
	rf.register(fs)
	return cmd
}

// exactArgsf is exactArgs with the count given in the message.
func exactArgsf(n int, format string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(format+"; see `%s --help`", len(args), cmd.CommandPath())
		}
		return nil
	}
}

// runsCompare prints `evalsi runs compare BASE HEAD`.
func runsCompare(ctx context.Context, rf *runsFlags, baseID, headID string, o compareOptions, stdout, stderr io.Writer) error {
	st, closeStore, err := rf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	by := o.by
	if by == "" {
		by = report.DefaultPassScore
	}
	c, err := report.CompareRuns(ctx, st, baseID, headID, report.CompareOptions{PassScore: by})
	if err != nil {
		return notFoundIsUsage(err)
	}
	if o.asJSON {
		err = json.NewEncoder(stdout).Encode(c)
	} else {
		err = report.WriteComparison(stdout, c, o.all)
	}
	if err != nil {
		return err
	}
	if n := c.Counts[report.Regressed]; o.failOnRegression && n > 0 {
		fmt.Fprintf(stderr, "evalsi: %d record(s) regressed from %s to %s\n", n, c.Base.ID, c.Head.ID)
		return &exitError{code: exitFailUnder}
	}
	return nil
}

func newRunsExportCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runsFlags{}
	var format, out string
	cmd := &cobra.Command{
		Use:   "export RUN [flags]",
		Short: "Export a run's trials with their trajectories (JSONL or Parquet)",
		Long: `Export a run (id or unique prefix): with --format jsonl, one JSON object per
trial with its record, verdict, scores and whole trajectory (for analysis and
training data); with --format parquet, one row per trial (needs -o PATH).`,
		Example: `  evalsi runs export r-20261129-085301-ab12cd --format jsonl > run.jsonl
  evalsi runs export r-20261129-085301-ab12cd --format parquet -o run.parquet`,
		Args: exactArgs(1, "runs export needs one RUN id (or a unique prefix)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runsExport(cmd.Context(), rf, args[0], format, out, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&format, "format", "jsonl", "export format: jsonl (one JSON object per trial, with its events) or parquet (one row per trial; needs -o)")
	fs.StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	rf.register(fs)
	return cmd
}

// runsExport writes `evalsi runs export RUN --format jsonl`.
func runsExport(ctx context.Context, rf *runsFlags, runID, format, out string, stdout, stderr io.Writer) error {
	var parquet bool
	switch strings.ToLower(format) {
	case "jsonl":
	case "parquet":
		// A binary file does not belong on a terminal or in a pipe by surprise.
		if out == "" {
			return usagef("--format parquet writes a binary file: give -o PATH")
		}
		parquet = true
	default:
		return usagef("--format %q: want jsonl or parquet", format)
	}
	st, closeStore, err := rf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	export := st.ExportJSONL
	if parquet {
		export = st.ExportParquet
	}
	w := stdout
	var f *os.File
	if out != "" {
		if f, err = os.Create(out); err != nil {
			return usagef("-o %s: %v", out, err)
		}
		defer f.Close()
		w = f
	}
	if err := export(ctx, w, runID); err != nil {
		return notFoundIsUsage(err)
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

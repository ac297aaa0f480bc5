package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"evals.si/report"
	"evals.si/store"
)

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`runs compare A B --json`), which flag.Parse alone
// does not: it stops at the first positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// cmdRunsCompare prints `evalsi runs compare BASE HEAD`.
func cmdRunsCompare(ctx context.Context, rf *runsFlags, args []string, asJSON bool, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi runs compare", stderr)
	rf.register(fs)
	jsonFlag := fs.Bool("json", false, "print the comparison as one JSON object")
	by := fs.String("by", report.DefaultPassScore, "the score that decides a record's verdict when both runs have it")
	all := fs.Bool("all", false, "list unchanged records too")
	failOnRegression := fs.Bool("fail-on-regression", false, "exit 1 when any record regressed (for CI)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err}
	}
	if len(pos) != 2 {
		return usagef("runs compare needs two runs: BASE HEAD (ids or unique prefixes), got %d", len(pos))
	}
	st, closeStore, err := rf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	c, err := report.CompareRuns(ctx, st, pos[0], pos[1], report.CompareOptions{PassScore: *by})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return &usageError{err}
		}
		return err
	}
	if asJSON || *jsonFlag {
		err = json.NewEncoder(stdout).Encode(c)
	} else {
		err = report.WriteComparison(stdout, c, *all)
	}
	if err != nil {
		return err
	}
	if n := c.Counts[report.Regressed]; *failOnRegression && n > 0 {
		fmt.Fprintf(stderr, "evalsi: %d record(s) regressed from %s to %s\n", n, c.Base.ID, c.Head.ID)
		return &exitError{code: exitFailUnder}
	}
	return nil
}

// cmdRunsExport writes `evalsi runs export RUN --format jsonl`.
func cmdRunsExport(ctx context.Context, rf *runsFlags, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi runs export", stderr)
	rf.register(fs)
	format := fs.String("format", "jsonl", "export format: jsonl (one JSON object per trial, with its events) or parquet (one row per trial; needs -o)")
	out := fs.String("o", "", "write to this file instead of stdout")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err}
	}
	if len(pos) != 1 {
		return usagef("runs export needs one RUN id (or a unique prefix)")
	}
	st, closeStore, err := rf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeStore()
	export := st.ExportJSONL
	switch strings.ToLower(*format) {
	case "jsonl":
	case "parquet":
		// A binary file does not belong on a terminal or in a pipe by surprise.
		if *out == "" {
			return usagef("--format parquet writes a binary file: give -o PATH")
		}
		export = st.ExportParquet
	default:
		return usagef("--format %q: want jsonl or parquet", *format)
	}
	w := stdout
	var f *os.File
	if *out != "" {
		if f, err = os.Create(*out); err != nil {
			return usagef("-o %s: %v", *out, err)
		}
		defer f.Close()
		w = f
	}
	if err := export(ctx, w, pos[0]); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return &usageError{err}
		}
		return err
	}
	if f != nil {
		return f.Close()
	}
	return nil
}

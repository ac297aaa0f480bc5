package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"evals.si/bench/bfcl"
	"evals.si/bench/harbor"
	"evals.si/bench/importer"
	"evals.si/bench/swebench"
	"evals.si/bench/taubench"
	"evals.si/bench/terminalbench"
)

// benchImporters are the dataset schemes whose imports can be inspected.
var benchImporters = map[string]importer.Importer{
	terminalbench.Scheme: terminalbench.Importer{},
	harbor.Scheme:        harbor.Importer{},
	swebench.Scheme:      swebench.Importer{},
	bfcl.Scheme:          bfcl.Importer{Getenv: os.Getenv},
	taubench.Scheme:      taubench.Importer{Getenv: os.Getenv},
}

func newDatasetsCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "datasets",
		Short: "Inspect benchmark datasets before running them",
		Args:  subcommandArgs,
		RunE:  needSubcommand,
	}
	var asJSON bool
	inspect := &cobra.Command{
		Use:   "inspect URI [flags]",
		Short: "Show how many tasks of a benchmark import, and why others are refused",
		Long: `Import a benchmark dataset as a run would (schemes: ` + strings.Join(benchSchemes(), ", ") + `) and
print how many tasks import, each with what it honours only in part (ok when
nothing), and each refused task with its reason.`,
		Example: "  evalsi datasets inspect terminal-bench://path/to/tasks\n  evalsi datasets inspect harbor://path/to/tasks --json",
		Args:    exactArgs(1, "datasets inspect needs one URI, e.g. terminal-bench://path/to/tasks"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return datasetsInspect(cmd.Context(), args[0], asJSON, stdout)
		},
	}
	inspect.Flags().BoolVar(&asJSON, "json", false, "print JSON (records' ids, the refusals, and the notes of tasks honoured in part)")
	cmd.AddCommand(inspect)
	return cmd
}

func benchSchemes() []string {
	known := make([]string, 0, len(benchImporters))
	for k := range benchImporters {
		known = append(known, k)
	}
	sort.Strings(known)
	return known
}

// datasetsInspect is `evalsi datasets inspect URI`: how many tasks import,
// each with what it honours only in part (ok when nothing), and each
// refused one with its reason.
func datasetsInspect(ctx context.Context, raw string, asJSON bool, stdout io.Writer) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return usagef("%q is not a dataset URI such as terminal-bench://DIR", raw)
	}
	imp, ok := benchImporters[strings.ToLower(u.Scheme)]
	if !ok {
		return usagef("no importer for scheme %q (known: %s)", u.Scheme, strings.Join(benchSchemes(), ", "))
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	res, err := imp.Import(ctx, u, wd)
	if err != nil {
		return &usageError{fmt.Errorf("importing %s: %w", raw, err)}
	}
	if asJSON {
		ids := make([]string, len(res.Records))
		for i, r := range res.Records {
			ids[i] = r.ID
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"imported": ids, "refused": res.Refused, "partial": res.Notes})
	}
	partial := 0
	for _, r := range res.Records {
		if len(res.Notes[r.ID]) > 0 {
			partial++
		}
	}
	fmt.Fprintf(stdout, "%d task(s) import (%d honoured only in part), %d refused\n", len(res.Records), partial, len(res.Refused))
	for _, r := range res.Records {
		notes := res.Notes[r.ID]
		if len(notes) == 0 {
			fmt.Fprintf(stdout, "  ok       %s\n", r.ID)
			continue
		}
		fmt.Fprintf(stdout, "  partial  %s\n", r.ID)
		for _, n := range notes {
			fmt.Fprintf(stdout, "           - %s\n", n)
		}
	}
	for _, r := range res.Refused {
		fmt.Fprintf(stdout, "  refused  %s: %s\n", r.Task, r.Reason)
	}
	return nil
}

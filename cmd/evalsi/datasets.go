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

// cmdDatasets is `evalsi datasets inspect URI`: how many tasks import,
// each with what it honours only in part (ok when nothing), and each
// refused one with its reason.
func cmdDatasets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "inspect" {
		return usagef("datasets needs a subcommand: inspect URI")
	}
	fs := newFlagSet("evalsi datasets inspect", stderr)
	asJSON := fs.Bool("json", false, "print JSON (records' ids, the refusals, and the notes of tasks honoured in part)")
	if err := fs.Parse(args[1:]); err != nil {
		return &usageError{err}
	}
	if fs.NArg() != 1 {
		return usagef("datasets inspect needs one URI, e.g. terminal-bench://path/to/tasks")
	}
	raw := fs.Arg(0)
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return usagef("%q is not a dataset URI such as terminal-bench://DIR", raw)
	}
	imp, ok := benchImporters[strings.ToLower(u.Scheme)]
	if !ok {
		known := make([]string, 0, len(benchImporters))
		for k := range benchImporters {
			known = append(known, k)
		}
		sort.Strings(known)
		return usagef("no importer for scheme %q (known: %s)", u.Scheme, strings.Join(known, ", "))
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	res, err := imp.Import(ctx, u, wd)
	if err != nil {
		return &usageError{fmt.Errorf("importing %s: %w", raw, err)}
	}
	if *asJSON {
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

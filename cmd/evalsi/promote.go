package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"evals.si/api"
	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/regress"
	"evals.si/store"
)

// promoteRequest is what `evalsi promote` asks for, wherever the datasets
// live.
type promoteRequest struct {
	Run            string
	Dataset        string
	When           string
	IncludeOutputs bool
}

// promoteResult is what a promote did.
type promoteResult struct {
	Added, Skipped int
	// Where names the dataset file (or, on a server, the dataset).
	Where string
}

// promoter carries out a promote: the local store and datasets directory
// here; a server's API with --server.
type promoter interface {
	Promote(ctx context.Context, req promoteRequest) (promoteResult, error)
}

// localPromoter promotes from the embedded store into the datasets
// directory beside it, as project "local".
type localPromoter struct {
	store regress.PromoteStore
	dir   string
}

func (p localPromoter) Promote(ctx context.Context, req promoteRequest) (promoteResult, error) {
	o := regress.Options{Dataset: req.Dataset, When: req.When, IncludeOutputs: req.IncludeOutputs, Project: regress.LocalProject, Dir: p.dir}
	added, skipped, err := regress.Promote(ctx, p.store, req.Run, o)
	if err != nil {
		return promoteResult{}, err
	}
	path, err := regress.DatasetPath(p.dir, o.Project, o.Dataset)
	return promoteResult{Added: added, Skipped: skipped, Where: path}, err
}

// serverPromoter promotes on a server, into promoted/<project>/<name>.jsonl
// of its datasets_dir; the server checks datasets.write.
type serverPromoter struct{ c *apiclient.Client }

func (p serverPromoter) Promote(ctx context.Context, req promoteRequest) (promoteResult, error) {
	res, err := p.c.Promote(ctx, req.Run, api.PromoteRequest{Dataset: req.Dataset, When: req.When, IncludeOutputs: req.IncludeOutputs})
	if err != nil {
		return promoteResult{}, serverErr(fmt.Errorf("promoting run %s on %s: %w", req.Run, p.c.Base(), err))
	}
	return promoteResult{Added: res.Added, Skipped: res.Skipped, Where: fmt.Sprintf("%s in the datasets_dir of %s", res.Path, p.c.Base())}, nil
}

func newPromoteCmd(stdout, stderr io.Writer) *cobra.Command {
	var req promoteRequest
	var storePath, server string
	cmd := &cobra.Command{
		Use:   "promote RUN --dataset NAME --when CEL [flags]",
		Short: "Append a run's records where a condition holds to a dataset",
		Long: `Append the records of run RUN (id or unique prefix) where the CEL condition
--when holds (over scores, errored, trial and record) to the dataset
promoted/<project>/NAME.jsonl in the datasets directory (beside the store;
on a server, its datasets_dir). A promoted record's id is <run>/<record>, so
promoting the same run again adds nothing.`,
		Example: `  evalsi promote r-20261129-085301-ab12cd --dataset fix-calc-failures --when 'scores["task-success"] < 1'`,
		Args:    exactArgs(1, "promote needs one RUN id (or a unique prefix)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Run = args[0]
			return cmdPromote(cmd, req, storePath, server, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Dataset, "dataset", "", "the dataset to append to: promoted/<project>/NAME.jsonl in the datasets directory")
	fs.StringVar(&req.When, "when", "", `CEL condition over scores, errored, trial and record, e.g. 'scores["task-success"] < 1.0'`)
	fs.BoolVar(&req.IncludeOutputs, "include-outputs", false, "keep each trial's output, scores and trajectory in metadata.promoted_from")
	fs.StringVar(&storePath, "store", "", "store database `PATH` (default: the user's data directory); datasets go in datasets/ beside it")
	fs.StringVar(&server, "server", "", serverUsage)
	return cmd
}

// cmdPromote is `evalsi promote RUN --dataset NAME --when CEL
// [--include-outputs]`.
func cmdPromote(cmd *cobra.Command, req promoteRequest, storePath, server string, stdout, stderr io.Writer) error {
	ctx := cmd.Context()
	if req.Dataset == "" || req.When == "" {
		return usagef(`promote needs --dataset NAME and --when CEL, e.g. --when 'scores["task-success"] < 1.0'`)
	}
	if server != "" {
		if err := refuseWithServer(cmd.Flags(), "store"); err != nil {
			return err
		}
		c, err := dialServer(server)
		if err != nil {
			return err
		}
		return promote(ctx, serverPromoter{c}, req, stdout)
	}
	if err := storeMustExist(storePath); err != nil {
		return err
	}
	path := storePath
	if path == "" {
		var err error
		if path, err = store.DefaultPath(); err != nil {
			return err
		}
	}
	app, err := embedded.Open(ctx, embedded.Options{StorePath: path, Logger: newLogger(stderr, false)})
	if err != nil {
		return err
	}
	defer app.Close()
	p := localPromoter{store: app.Store(), dir: filepath.Join(filepath.Dir(path), "datasets")}
	return promote(ctx, p, req, stdout)
}

// promote runs req on p and says what it did.
func promote(ctx context.Context, p promoter, req promoteRequest, stdout io.Writer) error {
	res, err := p.Promote(ctx, req)
	if err != nil {
		var ie *regress.InvalidOptionError
		var ee *regress.EvalError
		if errors.As(err, &ie) || errors.As(err, &ee) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAmbiguous) {
			return &usageError{err}
		}
		return err
	}
	_, err = fmt.Fprintf(stdout, "promoted %d record(s) of run %s to %s (%d already there)\n", res.Added, req.Run, res.Where, res.Skipped)
	return err
}

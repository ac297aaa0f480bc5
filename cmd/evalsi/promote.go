package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

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

// cmdPromote is `evalsi promote RUN --dataset NAME --when CEL
// [--include-outputs]`.
func cmdPromote(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi promote", stderr)
	name := fs.String("dataset", "", "the dataset to append to: promoted/<project>/NAME.jsonl in the datasets directory")
	when := fs.String("when", "", `CEL condition over scores, errored, trial and record, e.g. 'scores["task-success"] < 1.0'`)
	withOutputs := fs.Bool("include-outputs", false, "keep each trial's output, scores and trajectory in metadata.promoted_from")
	storePath := fs.String("store", "", "store database path (default: the user's data directory); datasets go in datasets/ beside it")
	serverURL := addServerFlag(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err}
	}
	if len(pos) != 1 {
		return usagef("promote needs one RUN id (or a unique prefix)")
	}
	if *name == "" || *when == "" {
		return usagef(`promote needs --dataset NAME and --when CEL, e.g. --when 'scores["task-success"] < 1.0'`)
	}
	req := promoteRequest{Run: pos[0], Dataset: *name, When: *when, IncludeOutputs: *withOutputs}
	if *serverURL != "" {
		if err := refuseWithServer(fs, "store"); err != nil {
			return err
		}
		c, err := dialServer(*serverURL)
		if err != nil {
			return err
		}
		return promote(ctx, serverPromoter{c}, req, stdout)
	}
	path := *storePath
	if path == "" {
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

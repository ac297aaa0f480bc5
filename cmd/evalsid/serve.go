package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"evals.si/access"
	"evals.si/api"
	"evals.si/dataset/traces"
	"evals.si/planner"
	"evals.si/regress"
	"evals.si/server"
	"evals.si/store"
	"evals.si/store/postgres"
)

func newServeCmd(stdout, stderr io.Writer, logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve --config server.yaml",
		Short: "Serve the team server: API, viewer and scheduler",
		Long: `Serve the team server from its config file: the HTTP API that evalsi --server
and workers use, the run viewer, and the scheduler of leased trials. See
docs/server.md.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	cfgPath := fs.String("config", "", "server config file (server.yaml)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *cfgPath == "" || len(args) > 0 {
			return usageErr{errors.New("serve needs --config server.yaml and nothing else")}
		}
		cfg, err := server.LoadConfig(*cfgPath)
		if err != nil {
			return usageErr{err}
		}
		acc, err := access.New(cfg.Config, os.Getenv)
		if err != nil {
			return usageErr{fmt.Errorf("%s: %w", *cfgPath, err)}
		}
		st, err := openServerStore(ctx, cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		files, err := cfg.OpenDatasets(ctx, os.Getenv)
		if err != nil {
			return err
		}
		// Promotion and trace files write and read datasets_dir as a directory
		// of this machine; a datasets_dir in S3 has neither (localDir is "").
		localDir := ""
		if files != nil {
			localDir = files.LocalDir()
		}
		datasets := planner.Datasets()
		datasets.ServeRuns(regress.NewRunSource(st, logger))
		// A submitted spec reads only the trace backends the operator lists and
		// trace files under datasets_dir.
		datasets.ServeTraces(traces.NewSource(traces.Options{Logger: logger, AllowURL: cfg.AllowTraceURL, FileRoot: traceRoot(localDir)}))
		srv, err := server.New(server.Options{
			Store: st, Access: acc, Records: &planner.Host{Datasets: datasets, Logger: logger},
			DatasetsDir: localDir, Datasets: files, LeaseTTL: cfg.Leases.TTL.D(), MaxLeaseTTL: cfg.Leases.MaxTTL.D(),
			Viewer: cfg.ViewerOn(), Promote: promoter(localDir), Logger: logger,
			MaxTrials: cfg.MaxTrialsPerRun, AllowLocalImages: cfg.AllowLocalImages, AllowUnsafeHost: cfg.AllowUnsafeHost,
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go srv.Sweep(sctx, cfg.Leases.Sweep.D())
		scheme := "http"
		if cfg.TLS != nil {
			scheme = "https"
		}
		fmt.Fprintf(stdout, "evalsid: serving on %s://%s (API description at %s)\n", scheme, ln.Addr(), api.PathOpenAPI)
		errc := make(chan error, 1)
		go func() {
			if cfg.TLS != nil {
				errc <- hs.ServeTLS(ln, cfg.TLS.CertFile, cfg.TLS.KeyFile)
				return
			}
			errc <- hs.Serve(ln)
		}()
		select {
		case err := <-errc:
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
		}
		shut, cancelShut := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancelShut()
		return hs.Shutdown(shut)
	}
	return cmd
}

// traceRoot confines traces.file to datasets_dir; a server without one
// reads no trace files (a root no path is inside).
func traceRoot(dir string) string {
	if dir == "" {
		return "/nonexistent/evalsi-no-datasets-dir"
	}
	return dir
}

func openServerStore(ctx context.Context, cfg *server.Config) (server.Store, error) {
	if cfg.Store.SQLite != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Store.SQLite), 0o700); err != nil {
			return nil, err
		}
		st, err := store.Open(ctx, cfg.Store.SQLite)
		if err != nil {
			return nil, fmt.Errorf("opening the store %s: %w", cfg.Store.SQLite, err)
		}
		return st, nil
	}
	dsn := os.Getenv(cfg.Store.PostgresEnv)
	if dsn == "" {
		return nil, usageErr{fmt.Errorf("store.postgres_env names %s, which is not set (it must hold the PostgreSQL DSN)", cfg.Store.PostgresEnv)}
	}
	blobs, err := cfg.OpenBlobs(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	st, err := postgres.Open(ctx, dsn, blobs)
	if err != nil {
		return nil, fmt.Errorf("opening the PostgreSQL store: %w", err)
	}
	return st, nil
}

// promoter appends to <datasets_dir>/promoted/<project>/<name>.jsonl.
func promoter(dir string) server.PromoteFunc {
	if dir == "" {
		return nil
	}
	return func(ctx context.Context, st server.Store, project, runID string, req api.PromoteRequest) (api.PromoteResult, error) {
		o := regress.Options{Dataset: req.Dataset, When: req.When, IncludeOutputs: req.IncludeOutputs, Project: project, Dir: dir}
		added, skipped, err := regress.Promote(ctx, st, runID, o)
		if err != nil {
			return api.PromoteResult{}, err
		}
		path, err := regress.DatasetPath(dir, project, req.Dataset)
		if err != nil {
			return api.PromoteResult{}, err
		}
		// The client sees the path under datasets_dir, not the server's
		// file system.
		if rel, err := filepath.Rel(dir, path); err == nil {
			path = rel
		}
		return api.PromoteResult{Added: added, Skipped: skipped, Path: path}, nil
	}
}

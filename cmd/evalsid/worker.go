package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/remoteworker"
)

func worker(ctx context.Context, args []string, stderr io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("evalsid worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serverURL := fs.String("server", "", "the server to lease trials from (http://host:port); the token is read from EVALSI_TOKEN or the config file")
	name := fs.String("name", "", "this worker's name on its leases (default: host-pid)")
	slots := fs.Int("slots", 0, "trials run at once (default: 2 per CPU)")
	stateDir := fs.String("state-dir", "", "images, sandboxes and proxy sockets (default: the user's data directory)")
	unsafeHost := fs.Bool("allow-unsafe-host", false, "let runs use the host rung (no sandbox) on this worker, where the server allows it too")
	dir := fs.String("dir", "", "where relative paths of a run's spec resolve on this worker (default: the working directory)")
	if err := fs.Parse(args); err != nil {
		return usageErr{err}
	}
	if *serverURL == "" || fs.NArg() > 0 {
		return usageErr{errors.New("worker needs --server URL and nothing else")}
	}
	tok, err := apiclient.Token(os.Getenv, *serverURL)
	if err != nil {
		return err
	}
	client, err := apiclient.New(*serverURL, tok)
	if err != nil {
		return usageErr{err}
	}
	host, err := embedded.OpenHost(ctx, embedded.HostOptions{StateDir: *stateDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("preparing this machine's sandboxes: %w", err)
	}
	defer host.Close()
	return remoteworker.Run(ctx, remoteworker.Options{Client: client, Host: host.Planner(), Name: *name, Slots: *slots, Dir: *dir, Logger: logger, AllowUnsafeHost: *unsafeHost})
}

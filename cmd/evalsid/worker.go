package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"evals.si/apiclient"
	"evals.si/embedded"
	"evals.si/remoteworker"
)

func newWorkerCmd(stderr io.Writer, logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --server URL [flags]",
		Short: "Lease trials from a server and run them",
		Long: `Lease trials from a server and run them on this machine, or in sandboxes
leased from a sandbox pool (--sandbox-address). The token is read from
EVALSI_TOKEN or the config file.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	serverURL := fs.String("server", "", "the server to lease trials from (http://host:port); the token is read from EVALSI_TOKEN or the config file")
	name := fs.String("name", "", "this worker's name on its leases (default: host-pid)")
	slots := fs.Int("slots", 0, "trials run at once (default: 2 per CPU)")
	stateDir := fs.String("state-dir", "", "images, sandboxes and proxy sockets (default: the user's data directory)")
	unsafeHost := fs.Bool("allow-unsafe-host", false, "let runs use the host rung (no sandbox) on this worker, where the server allows it too")
	dir := fs.String("dir", "", "where relative paths of a run's spec resolve on this worker (default: the working directory)")
	metricsListen := fs.String("metrics-listen", "", "serve /healthz, /readyz (ready once a lease request reached the server) and /metrics on this address (host:port, plain HTTP, no token)")
	cfgPath := fs.String("config", "", "worker config file (worker.yaml: sandbox: {address, ca, cert, key})")
	var sb sandboxAddr
	fs.StringVar(&sb.Address, "sandbox-address", "", "lease every sandbox from the sandbox pool at host:port (sandbox.address); this worker then runs none")
	fs.StringVar(&sb.CA, "sandbox-ca", "", "the CA that signed the pool's certificate (sandbox.ca)")
	fs.StringVar(&sb.Cert, "sandbox-cert", "", "this worker's client certificate for the pool (sandbox.cert)")
	fs.StringVar(&sb.Key, "sandbox-key", "", "its private key (sandbox.key)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *cfgPath != "" {
			cfg, err := loadWorkerConfig(*cfgPath)
			if err != nil {
				return usageErr{err}
			}
			// Flags win over the file.
			if sb.Address == "" {
				sb.Address = cfg.Sandbox.Address
			}
			for _, f := range []struct{ flag, file *string }{{&sb.CA, &cfg.Sandbox.CA}, {&sb.Cert, &cfg.Sandbox.Cert}, {&sb.Key, &cfg.Sandbox.Key}} {
				if *f.flag == "" {
					*f.flag = *f.file
				}
			}
		}
		if *serverURL == "" || len(args) > 0 {
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
		var metrics *remoteworker.Metrics
		if *metricsListen != "" {
			metrics = remoteworker.NewMetrics()
			stop, err := serveProbes(*metricsListen, metrics.Handler(logger), logger)
			if err != nil {
				return err
			}
			defer stop()
		}
		hostOpts := embedded.HostOptions{StateDir: *stateDir, Logger: logger}
		pool, err := dialPool(ctx, sb, logger)
		if err != nil {
			return err
		}
		if pool != nil {
			defer pool.Close()
			hostOpts.Pool = pool
		}
		host, err := embedded.OpenHost(ctx, hostOpts)
		if err != nil {
			return fmt.Errorf("preparing this machine's sandboxes: %w", err)
		}
		defer host.Close()
		return remoteworker.Run(ctx, remoteworker.Options{Client: client, Host: host.Planner(), Name: *name, Slots: *slots, Dir: *dir, Logger: logger, AllowUnsafeHost: *unsafeHost, Metrics: metrics})
	}
	return cmd
}

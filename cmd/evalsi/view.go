package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"evals.si/store"
	"evals.si/web"
)

// viewFlags are `evalsi view`'s.
type viewFlags struct {
	storePath, listen, server string
	verbose                   bool
}

func newViewCmd(stdout, stderr io.Writer) *cobra.Command {
	vf := &viewFlags{}
	cmd := &cobra.Command{
		Use:   "view [flags] | view --server URL [RUN]",
		Short: "Serve the run viewer for the local store (or print a run's page on a server)",
		Long: `Serve the run viewer (runs, trials as transcripts, comparisons) for the local
store on --listen until interrupted; it has no authentication, so it listens
on loopback unless told otherwise. With --server URL, print where the
server's own viewer shows the run (or all runs) instead.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if vf.server == "" && len(args) > 0 {
				return usagef("view takes no arguments, got %q (a run's page is on a server's viewer: --server URL RUN)", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdView(cmd, vf, args, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	addStoreFlag(fs, &vf.storePath)
	fs.StringVar(&vf.listen, "listen", "127.0.0.1:0", "address to serve on (port 0 picks a free port)")
	fs.BoolVarP(&vf.verbose, "verbose", "v", false, "debug logs on stderr")
	fs.StringVar(&vf.server, "server", "", serverUsage)
	return cmd
}

// cmdView serves the run viewer until interrupted.
func cmdView(cmd *cobra.Command, vf *viewFlags, pos []string, stdout, stderr io.Writer) error {
	ctx := cmd.Context()
	if vf.server != "" {
		if err := refuseWithServer(cmd.Flags(), "store", "listen"); err != nil {
			return err
		}
		return viewOnServer(ctx, vf.server, pos, stdout)
	}
	if err := storeMustExist(vf.storePath); err != nil {
		return err
	}
	logger := newLogger(stderr, vf.verbose)
	st, err := store.Open(ctx, vf.storePath)
	if err != nil {
		return err
	}
	defer st.Close()

	ln, err := net.Listen("tcp", vf.listen)
	if err != nil {
		return usagef("--listen %s: %v", vf.listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		// The viewer has no authentication: everything in the store,
		// agent outputs included, is readable by whoever reaches it.
		logger.Warn("the viewer has no authentication and listens beyond this machine", "addr", addr.String())
	}
	srv := &http.Server{Handler: web.New(st, logger), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "evalsi viewer on http://%s/ (store %s); Ctrl-C stops it\n", addr, st.Path())

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving the viewer on %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping the viewer: %w", err)
	}
	return nil
}

// viewOnServer prints where the server's own viewer shows the run (or all
// runs): a server serves the viewer itself, behind its /login page, so
// nothing runs here.
func viewOnServer(ctx context.Context, base string, pos []string, stdout io.Writer) error {
	if len(pos) > 1 {
		return usagef("view --server takes at most one RUN, got %q", pos)
	}
	c, err := dialServer(base)
	if err != nil {
		return err
	}
	on, err := viewerOn(ctx, c.Base())
	if err != nil {
		return err
	}
	if !on {
		return usagef("the server at %s does not serve the viewer (viewer: false in its config); read runs with `evalsi runs list --server %s`", c.Base(), c.Base())
	}
	page := c.Base() + "/"
	if len(pos) == 1 {
		// The run's full id, and a check that this token may read it.
		r, err := c.Run(ctx, pos[0])
		if err != nil {
			return serverErr(fmt.Errorf("run %s: %w", pos[0], err))
		}
		page = c.Base() + "/runs/" + url.PathEscape(r.ID)
	}
	_, err = fmt.Fprintf(stdout, "%s\nsign in at %s/login with your API token (the one in EVALSI_TOKEN or the config file) if the browser asks\n", page, c.Base())
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"evals.si/store"
	"evals.si/web"
)

// cmdView serves the run viewer until interrupted.
func cmdView(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi view", stderr)
	storePath := fs.String("store", "", "store database path (default: the user's data directory)")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (port 0 picks a free port)")
	verbose := fs.Bool("v", false, "verbose logs on stderr")
	if err := fs.Parse(args); err != nil {
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("view takes no arguments, got %q", fs.Args())
	}
	logger := newLogger(stderr, *verbose)
	st, err := store.Open(ctx, *storePath)
	if err != nil {
		return err
	}
	defer st.Close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return usagef("--listen %s: %v", *listen, err)
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

// Command evalsid holds the daemon roles: the team server (serve), the
// workers that lease its trials (worker), the scripted model server and the
// sandbox probe.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"evals.si/embedded"
	"evals.si/modelserver"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

const usage = `evalsid runs Evals.si's daemon roles.

Usage:
  evalsid model-server --script SCRIPT.yaml [--listen 127.0.0.1:0] [--dump DIR]
  evalsid sandbox probe [--json]
  evalsid sandboxd --listen ADDR --tls-cert FILE --tls-key FILE --client-ca FILE --state-dir DIR [--rung bwrap|landlock|pod (--pod-namespace NS --pod-helper-image IMG ...)] [--allow-host HOST ...] [--health-listen ADDR]
  evalsid operator [--kubeconfig FILE] [--metrics-listen :8080] [--health-listen :8081] [--leader-elect] [--namespace NS]
  evalsid serve --config server.yaml
  evalsid worker --server URL [--config worker.yaml] [--sandbox-address HOST:PORT --sandbox-ca FILE --sandbox-cert FILE --sandbox-key FILE] [--name NAME] [--slots N] [--state-dir DIR] [--dir DIR] [--metrics-listen ADDR]
`

func main() {
	reexec.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch {
	case args[0] == "model-server":
		err = modelServer(ctx, args[1:], stdout, stderr, logger)
	case args[0] == "serve":
		err = serve(ctx, args[1:], stdout, stderr, logger)
	case args[0] == "operator":
		err = operator(ctx, args[1:], stderr, logger)
	case args[0] == "sandboxd":
		err = sandboxd(ctx, args[1:], stderr, logger)
	case args[0] == "worker":
		err = worker(ctx, args[1:], stderr, logger)
	case args[0] == "sandbox" && len(args) > 1 && args[1] == "probe":
		err = probe(ctx, args[2:], stdout, stderr)
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "evalsid: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "evalsid:", err)
		if _, ok := err.(usageErr); ok {
			return 2
		}
		return 1
	}
	return 0
}

type usageErr struct{ error }

func modelServer(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("evalsid model-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	script := fs.String("script", "", "script YAML (default, records, rules)")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on (a fixed port, e.g. 127.0.0.1:8089, for examples that name it)")
	dump := fs.String("dump", "", "write every request to this directory as NNNN-path.json (to see what a client sends)")
	if err := fs.Parse(args); err != nil {
		return usageErr{err}
	}
	if *script == "" {
		return usageErr{fmt.Errorf("model-server needs --script FILE")}
	}
	sc, err := modelserver.LoadScript(*script)
	if err != nil {
		return usageErr{err}
	}
	srv := modelserver.New(sc, logger)
	if *dump != "" {
		if err := srv.DumpTo(*dump); err != nil {
			return err
		}
	}
	addr, err := srv.Listen(ctx, *listen)
	if err != nil {
		return err
	}
	// The address goes to stdout so scripts can read the port of :0.
	fmt.Fprintf(stdout, "listening on http://%s\n", addr)
	<-ctx.Done()
	return nil
}

func probe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("evalsid sandbox probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, `print [{"rung","works","isolation","reason"}]`)
	if err := fs.Parse(args); err != nil {
		return usageErr{err}
	}
	probes := sandbox.ProbeAll(ctx, embedded.Rungs())
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(probes)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNG\tWORKS\tISOLATION\tREASON")
	for _, p := range probes {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", p.Rung, p.Works, p.Isolation, p.Reason)
	}
	return tw.Flush()
}

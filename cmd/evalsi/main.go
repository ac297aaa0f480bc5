// Command evalsi is what a person types: run a spec embedded, look at runs,
// print the spec's JSON Schema.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"evals.si/sandbox/reexec"
)

// Exit codes are a contract checked by scripts.
const (
	exitOK        = 0
	exitFailUnder = 1
	exitUsage     = 2
	exitErrored   = 3
	exitInternal  = 4
)

// usageError is a spec or usage error: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitError carries a non-zero exit code that is not a failure of evalsi.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	reexec.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `evalsi evaluates AI agents and models.

Usage:
  evalsi run -f SPEC [--json] [--fail-under NAME=VALUE]... [--junit PATH]
             [--judge-provider P --judge-model M] [--store PATH]
  evalsi runs list [--store PATH] [--json]
  evalsi runs show RUN [--store PATH] [--json]
  evalsi runs compare BASE HEAD [--json] [--by SCORE] [--all] [--fail-on-regression]
  evalsi runs export RUN --format jsonl|parquet [-o PATH] [--store PATH]
  evalsi view [--store PATH] [--listen 127.0.0.1:0]
  evalsi run --resume RUN | evalsi runs resume RUN [--store PATH] [--json]
  evalsi runs cancel RUN --server URL [--json]
  evalsi datasets inspect URI [--json]
  evalsi promote RUN --dataset NAME --when CEL [--include-outputs] [--store PATH]
  evalsi shadow -f CANDIDATE [--baseline RUN] [--json] [--store PATH]
  evalsi schema

With --server URL, run, runs list/show/compare/export, view and promote use
a server's API instead of the local store (run: --project P); the token
comes from EVALSI_TOKEN or the config file ($XDG_CONFIG_HOME/evalsi/config.yaml:
token: TOKEN, or servers: {URL: {token: TOKEN}}), never from a flag.
  evalsi run -f SPEC --server URL [--project P] [--json] [--junit PATH] ...
  evalsi view --server URL [RUN]    prints the run's page on the server's viewer

Exit codes: 0 ok; 1 a --fail-under threshold was missed; 2 spec or usage
error; 3 a trial errored; 4 internal error.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr)
	case "runs":
		err = cmdRuns(ctx, args[1:], stdout, stderr)
	case "view":
		err = cmdView(ctx, args[1:], stdout, stderr)
	case "datasets":
		err = cmdDatasets(ctx, args[1:], stdout, stderr)
	case "promote":
		err = cmdPromote(ctx, args[1:], stdout, stderr)
	case "shadow":
		err = cmdShadow(ctx, args[1:], stdout, stderr)
	case "schema":
		err = cmdSchema(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		err = usagef("unknown command %q; run `evalsi help`", args[0])
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "evalsi:", err)
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return exitUsage
	}
	return exitInternal
}

func newLogger(stderr io.Writer, verbose bool) *slog.Logger {
	lvl := slog.LevelWarn
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

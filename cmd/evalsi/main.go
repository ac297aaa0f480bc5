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

	"github.com/spf13/cobra"

	"evals.si/internal/cmdline"
	"evals.si/internal/loglevel"
	"evals.si/sandbox/reexec"
	"evals.si/telemetry"
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

const rootLong = `evalsi evaluates AI agents and models: it runs a run spec (YAML) embedded,
with a SQLite store under the user's data directory, or on a server, and reads
the runs it stored.

With --server URL, run, runs list/show/compare/export/cancel, view and
promote use a server's API instead of the local store (run: --project P).
The token comes from EVALSI_TOKEN or the config file
($XDG_CONFIG_HOME/evalsi/config.yaml: token: TOKEN, or
servers: {URL: {token: TOKEN}}), never from a flag.

Exit codes: 0 ok; 1 a --fail-under threshold was missed (or runs compare
--fail-on-regression found a regression); 2 spec or usage error; 3 a trial
errored; 4 internal error; 130 interrupted (resume with evalsi runs resume RUN).`

// newRootCmd builds the command tree writing to stdout and stderr; *ran is
// set once a command's own code starts, so an error before it (an unknown
// flag or command, bad arguments) is a usage error.
func newRootCmd(stdout, stderr io.Writer) (*cobra.Command, *bool) {
	root, ran := cmdline.NewRoot("evalsi", "Evaluate AI agents and models", rootLong, stdout, stderr,
		func(err error) error { return &usageError{err} })
	root.AddCommand(
		newRunCmd(stdout, stderr),
		newRunsCmd(stdout, stderr),
		newViewCmd(stdout, stderr),
		newDatasetsCmd(stdout, stderr),
		newPromoteCmd(stdout, stderr),
		newShadowCmd(stdout, stderr),
		newSchemaCmd(stdout),
	)
	return root, ran
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, ran := newRootCmd(stdout, stderr)
	if len(args) == 0 {
		// What to type, on stderr: nothing was asked, so it is a usage error.
		root.SetOut(stderr)
		root.InitDefaultHelpCmd()
		root.InitDefaultCompletionCmd()
		_ = root.Help()
		return exitUsage
	}
	root.SetArgs(cmdline.NormalizeArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && !*ran {
		var ue *usageError
		if !errors.As(err, &ue) {
			err = usagef("%v; see `%s --help`", err, cmd.CommandPath())
		}
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
	// A telemetry setting the user gave (OTEL_EXPORTER_OTLP_PROTOCOL, ...)
	// that cannot work is theirs to fix, as a bad flag is.
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) || errors.Is(err, telemetry.ErrConfig) {
		return exitUsage
	}
	return exitInternal
}

func newLogger(stderr io.Writer, verbose bool) *slog.Logger {
	// Notices (a long silent phase starting) show by default; Info's
	// per-sandbox and per-request lines only with --verbose.
	lvl := loglevel.Notice
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl, ReplaceAttr: loglevel.ReplaceAttr}))
}

// Command evalsid holds the daemon roles: the team server (serve), the
// workers that lease its trials (worker), the scripted model server and the
// sandbox probe.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"evals.si/embedded"
	"evals.si/internal/cmdline"
	"evals.si/modelserver"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

const rootLong = `evalsid runs Evals.si's daemon roles: the team server (serve), the workers
that lease its trials (worker), the sandbox pool (sandboxd), the Kubernetes
operator, the scripted model server and the sandbox probe.

Exit codes: 0 ok; 1 the role failed; 2 usage error.`

func main() {
	reexec.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// newRootCmd builds the command tree; *ran is set once a command's own
// code starts, so an error before it (an unknown flag or command) is a
// usage error.
func newRootCmd(stdout, stderr io.Writer, logger *slog.Logger) (*cobra.Command, *bool) {
	root, ran := cmdline.NewRoot("evalsid", "Evals.si's daemon roles", rootLong, stdout, stderr,
		func(err error) error { return usageErr{err} })
	sb := &cobra.Command{
		Use:   "sandbox",
		Short: "Inspect this host's sandbox rungs",
		Args:  subcommandArgs,
		RunE:  needSubcommand,
	}
	sb.AddCommand(newProbeCmd(stdout, stderr))
	root.AddCommand(
		newModelServerCmd(stdout, stderr, logger),
		sb,
		newSandboxdCmd(stderr, logger),
		newOperatorCmd(stderr, logger),
		newServeCmd(stdout, stderr, logger),
		newWorkerCmd(stderr, logger),
	)
	return root, ran
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	root, ran := newRootCmd(stdout, stderr, logger)
	if len(args) == 0 {
		// What to type, on stderr: nothing was asked, so it is a usage error.
		root.SetOut(stderr)
		root.InitDefaultHelpCmd()
		root.InitDefaultCompletionCmd()
		_ = root.Help()
		return 2
	}
	root.SetArgs(cmdline.NormalizeArgs(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ue usageErr
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "evalsid:", err)
		return 2
	}
	if !*ran {
		// cobra's own refusal (an unknown command, say), before the role ran.
		fmt.Fprintf(stderr, "evalsid: %v; see `%s --help`\n", err, cmd.CommandPath())
		return 2
	}
	fmt.Fprintln(stderr, "evalsid:", err)
	return 1
}

type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// subcommandArgs refuses an argument that names no subcommand of cmd.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return usageErr{cmdline.UnknownCommand(cmd, args[0])}
}

// needSubcommand is the RunE of a command that only groups others.
func needSubcommand(cmd *cobra.Command, args []string) error {
	return usageErr{cmdline.NeedSubcommand(cmd)}
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cmdline.NoArgs(cmd, args); err != nil {
		return usageErr{err}
	}
	return nil
}

func newModelServerCmd(stdout, stderr io.Writer, logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model-server --script SCRIPT.yaml [flags]",
		Short: "Serve a scripted model for offline runs and demos",
		Long: `Serve the OpenAI-compatible, Anthropic and Responses APIs from a script (default,
records, rules) on --listen, printing its address on stdout, until interrupted.
Offline examples and agent demos point their base_url at it.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	script := fs.String("script", "", "script YAML (default, records, rules)")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on (a fixed port, e.g. 127.0.0.1:8089, for examples that name it)")
	dump := fs.String("dump", "", "write every request to this directory as NNNN-path.json (to see what a client sends)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
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
	return cmd
}

func newProbeCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "probe [flags]",
		Short: "Show which sandbox rungs work on this host",
		Long: `Probe every sandbox rung (firecracker, bwrap, landlock, docker, host, ...) and
print whether it works here, its isolation level and, when not, why.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	asJSON := fs.Bool("json", false, `print [{"rung","works","isolation","reason"}]`)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
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
	return cmd
}

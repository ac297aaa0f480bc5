package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/report"
	"evals.si/spec"
)

// thresholds collects repeated --fail-under NAME=VALUE flags.
type thresholds map[string]float64

func (t thresholds) String() string {
	parts := make([]string, 0, len(t))
	for k, v := range t {
		parts = append(parts, k+"="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (t thresholds) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE, e.g. task-success=0.8")
	}
	f, err := strconv.ParseFloat(val, 64)
	if err != nil {
		return fmt.Errorf("value of %s: %w", name, err)
	}
	t[name] = f
	return nil
}

func (t thresholds) Type() string { return "NAME=VALUE" }

// runFlags are `evalsi run`'s.
type runFlags struct {
	file, storePath, judgeProvider, judgeModel, junit, resume string
	server, project                                           string
	asJSON, verbose, estimate                                 bool
	maxCost                                                   float64
	maxTokens                                                 int
	failUnder                                                 thresholds
	mirrors                                                   imageMirrors
}

const runLong = `Run a run spec: plan its records × trials, run each trial (in a sandbox for
agent runs), grade it with the checker and the evaluators, store everything
and print a summary: a table, or with --json exactly one JSON object (run_id,
status, records, trials, errored, scores, cost_usd, tokens, ...).

Embedded by default: the run happens here, stored in --store (created when
missing). With --server URL it is submitted to a server and followed; Ctrl-C
then detaches and the run carries on there.

Progress goes to stdout as it runs (not with --json): one live line on a
terminal, one line per finished trial otherwise or with --verbose.`

const runExample = `  evalsi run -f examples/agents/fix-calc.yaml --judge-provider anthropic --judge-model claude-opus-5-5
  evalsi run -f examples/agents/fix-calc.yaml --server http://localhost:8080
  evalsi run -f spec.yaml --json --fail-under task-success=0.8 --junit report.xml
  evalsi run --resume r-20261129-085301-ab12cd`

func newRunCmd(stdout, stderr io.Writer) *cobra.Command {
	rf := &runFlags{failUnder: thresholds{}, mirrors: imageMirrors{}}
	cmd := &cobra.Command{
		Use:     "run [-f] SPEC [flags]",
		Short:   "Run a spec (embedded, or on a server with --server)",
		Long:    runLong,
		Example: runExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 || len(args) == 1 && rf.file != "" {
				return usagef("run takes one spec: -f SPEC (or SPEC), got %q; see `evalsi run --help`", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if rf.file == "" && len(args) == 1 {
				rf.file = args[0]
			}
			return cmdRun(cmd, rf, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVarP(&rf.file, "file", "f", "", "the run spec (YAML) to run")
	fs.BoolVar(&rf.asJSON, "json", false, "print exactly one JSON object on stdout (the summary), and no progress")
	fs.StringVar(&rf.judgeProvider, "judge-provider", "", "override the spec's judge connector (openai, anthropic, scripted)")
	fs.StringVar(&rf.judgeModel, "judge-model", "", "override the spec's judge model")
	fs.Var(rf.failUnder, "fail-under", "exit 1 when the mean of score NAME is below VALUE (repeatable)")
	fs.StringVar(&rf.junit, "junit", "", "also write a JUnit XML report to `PATH`")
	addStoreFlag(fs, &rf.storePath)
	fs.Float64Var(&rf.maxCost, "max-cost", 0, "stop starting trials once the run has spent `USD` (retries included), overriding the spec's budget.usd; the rest wait for `evalsi runs resume RUN --max-cost MORE`")
	fs.IntVar(&rf.maxTokens, "max-tokens", 0, "stop starting trials once the run has used `N` tokens (retries included), overriding the spec's budget.tokens")
	fs.BoolVar(&rf.estimate, "estimate", false, "print what the run may spend (from pricing, the harness's budgets and the cap) and exit, running nothing")
	fs.StringVar(&rf.resume, "resume", "", "continue the interrupted or killed run `RUN` (id or unique prefix) instead of starting one")
	fs.Var(rf.mirrors, "image-mirror", "resolve image FROM (a reference or prefix) as TO, e.g. oci-layout:PATH; added to environment.image_mirrors, winning over it (repeatable)")
	fs.BoolVarP(&rf.verbose, "verbose", "v", false, "one progress line per finished trial even on a terminal, and debug logs on stderr")
	fs.StringVar(&rf.server, "server", "", serverUsage)
	fs.StringVar(&rf.project, "project", "", "with --server: the project the run belongs to (default: the token's)")
	return cmd
}

func cmdRun(cmd *cobra.Command, rf *runFlags, stdout, stderr io.Writer) error {
	ctx := cmd.Context()
	fs := cmd.Flags()
	if rf.server != "" {
		if rf.resume != "" {
			return usagef("--resume with --server: a server reopens runs its workers left by itself; follow one with `evalsi runs show RUN --server URL`")
		}
		if err := refuseWithServer(fs, "store"); err != nil {
			return err
		}
	} else if rf.project != "" {
		return usagef("--project names a project on a server: give --server URL too")
	}
	if err := validCost(rf.maxCost); err != nil {
		return err
	}
	if rf.maxTokens < 0 {
		return usagef("--max-tokens %d: give a positive number of tokens, or leave it out for no cap", rf.maxTokens)
	}
	out := runOutput{storePath: rf.storePath, asJSON: rf.asJSON, junit: rf.junit, verbose: rf.verbose, failUnder: rf.failUnder, maxCost: rf.maxCost, maxTokens: rf.maxTokens}
	if rf.resume != "" {
		if rf.estimate {
			return usagef("--estimate estimates a run before it starts: give -f SPEC, not --resume")
		}
		if rf.file != "" || rf.judgeProvider != "" || rf.judgeModel != "" || len(rf.mirrors) > 0 {
			return usagef("--resume continues a run with the spec it was started with; do not pass -f, a spec, --judge-* or --image-mirror flags with it")
		}
		return resumeRun(ctx, rf.resume, out, stdout, stderr)
	}
	if rf.file == "" {
		return usagef("run needs -f SPEC; see `evalsi run --help`")
	}
	f, err := spec.Load(rf.file)
	if err != nil {
		return &usageError{err}
	}
	if rf.judgeProvider != "" || rf.judgeModel != "" {
		if f.Spec.Judge == nil {
			f.Spec.Judge = &spec.ModelRef{}
		}
		if rf.judgeProvider != "" {
			// A different provider's script, key variable or base URL does
			// not carry over.
			if f.Spec.Judge.Connector != rf.judgeProvider {
				*f.Spec.Judge = spec.ModelRef{}
			}
			f.Spec.Judge.Connector = rf.judgeProvider
		}
		if rf.judgeModel != "" {
			f.Spec.Judge.Model = rf.judgeModel
		}
	}
	rf.mirrors.apply(f.Spec)
	// f.Validate, not f.Spec.Validate: its errors carry file:line:column.
	if err := f.Validate(); err != nil {
		return &usageError{err}
	}
	if rf.server != "" {
		// A server's workers do not enforce a run's budget yet: refuse it
		// rather than run without the cap the user asked for.
		if rf.maxCost > 0 || rf.maxTokens > 0 || f.Spec.Budget != nil {
			return usagef("a run's budget (budget: in the spec, --max-cost, --max-tokens) is enforced by embedded runs only; a server would run %s without it: run it embedded, or remove the budget", rf.file)
		}
		if rf.estimate {
			return usagef("--estimate runs embedded: leave out --server")
		}
		c, err := dialServer(rf.server)
		if err != nil {
			return err
		}
		return runOnServer(ctx, c, f, rf.project, out, stdout, stderr)
	}
	logger := newLogger(stderr, rf.verbose)
	app, err := embedded.Open(ctx, embedded.Options{StorePath: rf.storePath, Logger: logger})
	if err != nil {
		return err
	}
	defer closeApp(app, logger)
	if rf.estimate {
		est, err := app.Estimate(ctx, f, embedded.RunOptions{MaxCostUSD: rf.maxCost, MaxTokens: rf.maxTokens})
		if err != nil {
			var se embedded.SpecError
			if errors.As(err, &se) {
				return &usageError{err}
			}
			return err
		}
		if rf.asJSON {
			return json.NewEncoder(stdout).Encode(est)
		}
		return est.Write(stdout)
	}
	var prog *progressPrinter
	if !rf.asJSON {
		prog = newProgressPrinter(stdout, rf.verbose)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: prog.update, OnRunning: prog.update, MaxCostUSD: rf.maxCost, MaxTokens: rf.maxTokens})
	if err != nil {
		var se embedded.SpecError
		if errors.As(err, &se) {
			return &usageError{err}
		}
		return err
	}
	prog.done()
	return reportRun(ctx, app.WriteJUnit, sum, out, stdout, stderr)
}

// runOutput is how a finished run is reported.
type runOutput struct {
	storePath string
	asJSON    bool
	junit     string
	verbose   bool
	failUnder thresholds
	// maxCost and maxTokens are --max-cost and --max-tokens (0: the
	// spec's budget, if any).
	maxCost   float64
	maxTokens int
}

// validCost refuses a --max-cost that is no amount of money.
func validCost(usd float64) error {
	if usd < 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
		return usagef("--max-cost %v: give a positive amount of USD (e.g. --max-cost 5), or leave it out for no cap", usd)
	}
	return nil
}

// junitWriter writes a run's JUnit XML report to path.
type junitWriter func(ctx context.Context, runID, path string) error

// reportRun prints a finished run's summary and turns it into the exit code.
func reportRun(ctx context.Context, writeJUnit junitWriter, sum *engine.Summary, o runOutput, stdout, stderr io.Writer) error {
	if o.junit != "" {
		if err := writeJUnit(ctx, sum.RunID, o.junit); err != nil {
			return fmt.Errorf("writing JUnit report: %w", err)
		}
	}
	if o.asJSON {
		if err := report.WriteJSON(stdout, sum); err != nil {
			return err
		}
	} else if err := report.WriteTable(stdout, sum); err != nil {
		return err
	}
	// Exit codes: errored trials (3) win over missed thresholds (1), since
	// a mean over errored trials is not trustworthy.
	if sum.Errored > 0 {
		return &exitError{code: exitErrored}
	}
	var missed []string
	for name, min := range o.failUnder {
		got, ok := sum.Scores[name]
		if !ok {
			return usagef("--fail-under %s: the run has no score named %q (scores: %s)", name, name, scoreNames(sum.Scores))
		}
		if got < min {
			missed = append(missed, fmt.Sprintf("%s=%.3f < %.3f", name, got, min))
		}
	}
	if len(missed) > 0 {
		sort.Strings(missed)
		fmt.Fprintln(stderr, "evalsi: below threshold:", strings.Join(missed, ", "))
		return &exitError{code: exitFailUnder}
	}
	if sum.Stopped != "" {
		// The budget stopped it; it is resumable like an interrupted run.
		// The table says so already; with --json, stderr does.
		if o.asJSON {
			fmt.Fprintf(stderr, "evalsi: run %s %s; resume with a higher cap: evalsi runs resume %s --max-cost USD\n", sum.RunID, sum.Label(), sum.RunID)
		}
		return &exitError{code: 130}
	}
	if sum.Status == "interrupted" {
		fmt.Fprintf(stderr, "evalsi: run %s interrupted\n", sum.RunID)
		return &exitError{code: 130}
	}
	if sum.Status == "cancelled" {
		// Stopped on request, as an interrupted run is; its unfinished
		// trials were cancelled, not run.
		fmt.Fprintf(stderr, "evalsi: run %s was cancelled\n", sum.RunID)
		return &exitError{code: 130}
	}
	return nil
}

func scoreNames(m map[string]float64) string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func newSchemaCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the run spec's JSON Schema",
		Long:  "Print the JSON Schema of run specs (for editors and validators), as one JSON document on stdout.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := spec.Schema()
			if err != nil {
				return err
			}
			_, err = stdout.Write(append(b, '\n'))
			return err
		},
	}
}

// closeApp closes the engine after a command that ran trials. The results
// are stored by then; what failed to close (a sandbox's mounts or
// processes, left for the next engine's sweep) is a warning, not a failed
// command.
func closeApp(app *embedded.App, logger *slog.Logger) {
	if err := app.Close(); err != nil {
		logger.Warn("closing the engine", "err", err)
	}
}

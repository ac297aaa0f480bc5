package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/report"
	"evals.si/spec"
)

// thresholds collects repeated --fail-under NAME=VALUE flags.
type thresholds map[string]float64

func (t thresholds) String() string { return fmt.Sprint(map[string]float64(t)) }

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

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evalsi run", stderr)
	file := fs.String("f", "", "run spec file (YAML)")
	asJSON := fs.Bool("json", false, "print exactly one JSON object on stdout")
	storePath := fs.String("store", "", "store database path (default: the user's data directory)")
	judgeProvider := fs.String("judge-provider", "", "override the spec's judge connector (openai, anthropic, scripted)")
	judgeModel := fs.String("judge-model", "", "override the spec's judge model")
	junit := fs.String("junit", "", "also write a JUnit XML report to PATH")
	verbose := fs.Bool("v", false, "verbose logs on stderr")
	resume := fs.String("resume", "", "continue the interrupted or killed run RUN (id or unique prefix) instead of starting one")
	failUnder := thresholds{}
	fs.Var(failUnder, "fail-under", "NAME=VALUE: exit 1 when the mean of NAME is below VALUE (repeatable)")
	mirrors := imageMirrors{}
	fs.Var(mirrors, "image-mirror", "FROM=TO: resolve image FROM (a reference or prefix) as TO, e.g. oci-layout:PATH; added to environment.image_mirrors, winning over it (repeatable)")
	serverURL := addServerFlag(fs)
	project := fs.String("project", "", "with --server: the project the run belongs to (default: the token's)")
	if err := fs.Parse(args); err != nil {
		return &usageError{err}
	}
	if *serverURL != "" {
		if *resume != "" {
			return usagef("--resume with --server: a server reopens runs its workers left by itself; follow one with `evalsi runs show RUN --server URL`")
		}
		if err := refuseWithServer(fs, "store"); err != nil {
			return err
		}
	} else if *project != "" {
		return usagef("--project names a project on a server: give --server URL too")
	}
	if *resume != "" {
		if *file != "" || fs.NArg() > 0 || *judgeProvider != "" || *judgeModel != "" || len(mirrors) > 0 {
			return usagef("--resume continues a run with the spec it was started with; do not pass -f, a spec, --judge-* or --image-mirror flags with it")
		}
		return resumeRun(ctx, *resume, runOutput{storePath: *storePath, asJSON: *asJSON, junit: *junit, verbose: *verbose, failUnder: failUnder}, stdout, stderr)
	}
	if *file == "" {
		if fs.NArg() == 1 {
			*file = fs.Arg(0)
		} else {
			return usagef("run needs -f SPEC")
		}
	}
	f, err := spec.Load(*file)
	if err != nil {
		return &usageError{err}
	}
	if *judgeProvider != "" || *judgeModel != "" {
		if f.Spec.Judge == nil {
			f.Spec.Judge = &spec.ModelRef{}
		}
		if *judgeProvider != "" {
			// A different provider's script, key variable or base URL does
			// not carry over.
			if f.Spec.Judge.Connector != *judgeProvider {
				*f.Spec.Judge = spec.ModelRef{}
			}
			f.Spec.Judge.Connector = *judgeProvider
		}
		if *judgeModel != "" {
			f.Spec.Judge.Model = *judgeModel
		}
	}
	mirrors.apply(f.Spec)
	if err := f.Spec.Validate(); err != nil {
		return &usageError{err}
	}
	out := runOutput{asJSON: *asJSON, junit: *junit, verbose: *verbose, failUnder: failUnder}
	if *serverURL != "" {
		c, err := dialServer(*serverURL)
		if err != nil {
			return err
		}
		return runOnServer(ctx, c, f, *project, out, stdout, stderr)
	}
	logger := newLogger(stderr, *verbose)
	app, err := embedded.Open(ctx, embedded.Options{StorePath: *storePath, Logger: logger})
	if err != nil {
		return err
	}
	defer app.Close()
	var prog *progressPrinter
	if !*asJSON {
		prog = newProgressPrinter(stdout)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: prog.update})
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

func cmdSchema(args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usagef("schema takes no arguments")
	}
	b, err := spec.Schema()
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(b, '\n'))
	return err
}

var _ = os.Stdout

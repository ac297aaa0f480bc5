// Command bfclrate measures, in one run, how fast BFCL entries go through
// the engine and the bfcl adapter, next to bfcl-eval's own checker called
// directly on the same entries, and prints both with their ratio:
//
//   - through the adapter: an embedded run of the oracle over a category's
//     entries (each entry -trials times), exactly as `evalsi run` runs it:
//     one adapter process for the whole run, no sandbox, every event
//     recorded in a SQLite store. Reported: entries/s over the run's wall
//     time, and without the adapter's start (from the first finished
//     trial to the last), since BFCL runs are long enough for that to be
//     the figure that matters.
//
//   - direct: `python -m evalsi_bfcl.benchdirect` in the adapter's
//     environment, BFCL's checker on the same entries' oracle answers in a
//     loop, no harness, no gRPC.
//
//     CGO_ENABLED=0 go run ./bench/bfclrate [-data-dir DIR] [-category C] [-trials N] [-concurrency C]
//
// DIR defaults to $BFCL_DATA_DIR, else the repository's sibling
// ../shared/benchdata/bfcl (the samples the tests use).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"text/tabwriter"
	"time"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/harness/external"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
)

type options struct {
	dataDir, category   string
	trials, concurrency int
}

func main() {
	reexec.Init()
	var o options
	flag.StringVar(&o.dataDir, "data-dir", os.Getenv("BFCL_DATA_DIR"), "BFCL's data directory (default $BFCL_DATA_DIR, else ../shared/benchdata/bfcl)")
	flag.StringVar(&o.category, "category", "simple_python", "BFCL category")
	flag.IntVar(&o.trials, "trials", 40, "trials per entry (the entries are run this many times)")
	flag.IntVar(&o.concurrency, "concurrency", 0, "concurrent trials (default: the engine's)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bfclrate:", err)
		os.Exit(1)
	}
}

// root is the repository's root: the directory holding go.mod, from the
// working directory up.
func root() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s: run this from the repository", wd)
		}
	}
}

func run(ctx context.Context, o options, w io.Writer) error {
	repo, err := root()
	if err != nil {
		return err
	}
	if o.dataDir == "" {
		o.dataDir = filepath.Join(filepath.Dir(repo), "shared", "benchdata", "bfcl")
	}
	if o.dataDir, err = filepath.Abs(o.dataDir); err != nil {
		return err
	}
	adapters := filepath.Join(repo, "python", "adapters")
	python := filepath.Join(adapters, "bfcl", ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		return fmt.Errorf("the bfcl adapter is not installed (%v): run bash scripts/python-adapters.sh", err)
	}
	if os.Getenv(external.AdaptersEnv) == "" {
		os.Setenv(external.AdaptersEnv, adapters)
	}
	dir, err := os.MkdirTemp("", "evalsi-bfclrate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	through, err := throughAdapter(ctx, dir, o)
	if err != nil {
		return fmt.Errorf("through the adapter: %w", err)
	}
	direct, err := directChecker(ctx, python, o, through.n)
	if err != nil {
		return fmt.Errorf("direct checker: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "BFCL %s, %d trials (%d entries × %d)\n", o.category, through.n, through.n/o.trials, o.trials)
	fmt.Fprintln(tw, "PATH\tENTRIES/S\tNOTE")
	fmt.Fprintf(tw, "engine + adapter, whole run\t%.1f\twall %.2fs, adapter start included\n", float64(through.n)/through.wall.Seconds(), through.wall.Seconds())
	if through.steady > 0 {
		fmt.Fprintf(tw, "engine + adapter, steady\t%.1f\tfirst to last finished trial, %.2fs\n", float64(through.n-1)/through.steady.Seconds(), through.steady.Seconds())
	}
	fmt.Fprintf(tw, "bfcl-eval checker, direct\t%.1f\t%d checks in %.3fs, no harness\n", direct.PerSecond, direct.Entries, direct.Seconds)
	if through.steady > 0 && direct.PerSecond > 0 {
		fmt.Fprintf(tw, "ratio direct / steady\t%.1f×\t\n", direct.PerSecond/(float64(through.n-1)/through.steady.Seconds()))
	}
	return tw.Flush()
}

type throughResult struct {
	n            int
	wall, steady time.Duration
}

func throughAdapter(ctx context.Context, dir string, o options) (*throughResult, error) {
	s := map[string]any{
		"name":       "bfclrate-" + o.category,
		"dataset":    map[string]any{"uri": "bfcl://" + o.category + "?data_dir=" + o.dataDir},
		"target":     map[string]any{"agent": map[string]any{"oracle": map[string]any{}}},
		"harness":    map[string]any{"external": map[string]any{"python": "evalsi_bfcl:BFCLHarness"}},
		"trials":     o.trials,
		"evaluators": []any{"task-success"},
	}
	if o.concurrency > 0 {
		s["concurrency"] = o.concurrency
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	specPath := filepath.Join(dir, "bfcl.yaml")
	if err := os.WriteFile(specPath, b, 0o644); err != nil {
		return nil, err
	}
	f, err := spec.Load(specPath)
	if err != nil {
		return nil, err
	}
	if err := f.Spec.Validate(); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	var (
		mu          sync.Mutex
		first, last time.Time
		n           int
	)
	onProgress := func(engine.Progress) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		n++
	}
	start := time.Now()
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: onProgress})
	if err != nil {
		return nil, err
	}
	res := &throughResult{n: n, wall: time.Since(start), steady: last.Sub(first)}
	if sum.Status != engine.StatusCompleted || sum.Errored > 0 {
		return nil, fmt.Errorf("run %s ended %s with %d errored trials (%v)", sum.RunID, sum.Status, sum.Errored, sum.ErrorsByKind)
	}
	if v := sum.Scores["task-success"]; v != 1 {
		return nil, fmt.Errorf("run %s: the oracle's task-success is %v, not 1: the figures would not be of passing entries", sum.RunID, v)
	}
	return res, nil
}

type directResult struct {
	Entries   int     `json:"entries"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

func directChecker(ctx context.Context, python string, o options, n int) (*directResult, error) {
	cmd := exec.CommandContext(ctx, python, "-m", "evalsi_bfcl.benchdirect", "--data-dir", o.dataDir, "--category", o.category, "--n", fmt.Sprint(n))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", cmd, err, stderr.String())
	}
	var r directResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err != nil {
		return nil, fmt.Errorf("benchdirect printed %q, not its JSON line: %w", stdout.String(), err)
	}
	if r.Entries == 0 {
		return nil, errors.New("benchdirect checked no entries")
	}
	return &r, nil
}

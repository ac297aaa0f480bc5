package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/sandbox"
	"evals.si/spec"
)

const evalsiName = "Evals.si"

// evalsiTrials runs the task n times through the embedded engine as
// bench/throughput does: a scripted agent, bwrap sandboxes restored from
// the setup snapshot (the task's file), a SQLite store, every event
// recorded.
func evalsiTrials(ctx context.Context, dir string, o options, tk task) (*result, error) {
	specPath, err := writeSpec(dir, o, tk)
	if err != nil {
		return nil, err
	}
	f, err := spec.Load(specPath)
	if err != nil {
		return nil, fmt.Errorf("loading the generated spec: %w", err)
	}
	if err := f.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("validating the generated spec: %w", err)
	}
	res := &result{harness: evalsiName, version: "embedded", sandbox: "bwrap rung, from the setup snapshot"}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("opening the embedded engine: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			app.Close()
		}
	}()
	var mu sync.Mutex
	onProgress := func(p engine.Progress) {
		mu.Lock()
		defer mu.Unlock()
		res.latencies = append(res.latencies, p.Last.Timing.Total)
		if len(p.Last.Isolation) > 0 {
			var rep sandbox.Report
			if json.Unmarshal(p.Last.Isolation, &rep) == nil && rep.Rung != "" {
				res.rung = rep.Rung
			}
		}
	}
	runStart := time.Now()
	sum, err := app.Run(ctx, f, embedded.RunOptions{OnProgress: onProgress})
	if err != nil {
		return nil, fmt.Errorf("running the trials: %w", err)
	}
	res.span = time.Since(runStart)
	closed = true
	if err := app.Close(); err != nil {
		return nil, fmt.Errorf("closing the embedded engine: %w", err)
	}
	res.wall = time.Since(start)
	res.trials = len(res.latencies)
	if sum.Status != engine.StatusCompleted {
		return nil, fmt.Errorf("run %s ended %s", sum.RunID, sum.Status)
	}
	if sum.Errored > 0 {
		return nil, fmt.Errorf("run %s: %d trials errored (%v); see evalsi runs show %s --store %s (with -keep)", sum.RunID, sum.Errored, sum.ErrorsByKind, sum.RunID, filepath.Join(dir, "evalsi.db"))
	}
	if res.rung != "bwrap" {
		return nil, fmt.Errorf("the trials ran on the %q rung, want bwrap", res.rung)
	}
	if v, ok := sum.Scores["task-success"]; ok {
		res.passed = int(v*float64(res.trials) + 0.5)
	}
	res.notes = append(res.notes, "wall is embedded.Open to Close (store, state, setup snapshot, the trials, closing); trials span is the run alone; latency is each trial's recorded total")
	return res, nil
}

func writeSpec(dir string, o options, tk task) (string, error) {
	var recs []byte
	for i := range o.n {
		recs = fmt.Appendf(recs, `{"id": "t%05d", "input": "Print the greeting."}`+"\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "records.jsonl"), recs, 0o644); err != nil {
		return "", err
	}
	y := `name: peers
concurrency: ` + strconv.Itoa(o.concurrency) + `
dataset:
  path: records.jsonl
target:
  connector: scripted
  model: scripted-agent
  script:
    default:
      - tool_calls:
          - name: bash
            arguments: {command: ` + strconv.Quote(tk.command) + `}
      - content: "hello"
harness:
  builtin:
    max_steps: 5
environment:
  files:
    ` + tk.file + `: ` + strconv.Quote(tk.content) + `
  sandbox:
    workdir: /workspace
    network: deny
    ladder: [bwrap]
  checker:
    command: ["sh", "-c", ` + strconv.Quote(tk.check) + `]
    parser: exit-code
evaluators: [task-success]
`
	p := filepath.Join(dir, "peers.yaml")
	return p, os.WriteFile(p, []byte(y), 0o644)
}

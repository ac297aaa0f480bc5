// Package oracle is the oracle agent: instead of a model it applies each
// task's reference solution inside the sandbox, so that a benchmark's
// environments and graders can be validated without a model (every
// importable task should pass under it).
//
// The solution comes from the trial's record, its metadata.solution
// (agent.Task.Metadata), which the benchmark importers set: Terminal-Bench's
// solution.sh, Harbor's solution/ with solve.sh, SWE-bench's gold patch
// applied as the harness applies patches. A record without one is an
// error of the run, not a failed task.
package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

// MetaSolution is the record metadata key holding a Solution.
const MetaSolution = "solution"

// Solution is a task's reference solution: the JSON that benchmark
// importers put in metadata.solution (bench/importer.Solution has the same
// shape; the agent layer does not import the benchmark layer).
type Solution struct {
	// Files are written first (absolute paths, or relative to the workdir).
	Files map[string]string `json:"files,omitempty"`
	// Setup runs before Command (decoding carried binary files).
	Setup string `json:"setup,omitempty"`
	// Command runs with sh -c in the task's workdir.
	Command string `json:"command"`
	// Env is added to the command's environment.
	Env map[string]string `json:"env,omitempty"`
}

// DefaultTimeout bounds the solution command when the task sets none.
const DefaultTimeout = 30 * time.Minute

// Agent is the oracle agent. It holds nothing: each trial's task carries
// its record's solution, so one oracle serves any record, whichever worker
// leases it.
type Agent struct{}

// New returns an oracle agent.
func New() *Agent { return &Agent{} }

// Run applies the task's solution.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	raw, ok := t.Metadata[MetaSolution]
	if !ok || raw.IsZero() {
		return agent.Result{StopReason: agent.StopError}, fmt.Errorf("record %q has no metadata.solution: the oracle agent runs benchmark tasks whose importer supplies their reference solution", t.RecordID)
	}
	var sol Solution
	if err := json.Unmarshal(raw, &sol); err != nil {
		return agent.Result{StopReason: agent.StopError}, fmt.Errorf("record %q metadata.solution: %w", t.RecordID, err)
	}
	if strings.TrimSpace(sol.Command) == "" {
		return agent.Result{StopReason: agent.StopError}, fmt.Errorf("record %q metadata.solution has no command", t.RecordID)
	}
	emit := func(ev trajectory.Event) {
		if t.Emit != nil {
			_ = t.Emit.Emit(ev)
		}
	}
	names := make([]string, 0, len(sol.Files))
	for n := range sol.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	// Parent directories are made with mkdir first: it works the same on
	// every rung, whatever each rung's WriteFile does with new top-level
	// directories.
	var dirs []string
	for _, n := range names {
		d := path.Dir(n)
		if !path.IsAbs(d) {
			d = path.Join(t.Workdir, d)
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	// The solution's files are the harness's to place, as root (Harbor
	// uploads /solution as root and runs solve.sh as the agent's user):
	// only the solution itself runs as the task's user.
	files := t.Sandbox
	if t.Harness != nil {
		files = t.Harness
	}
	if len(dirs) > 0 {
		res, err := files.Exec(ctx, sandbox.ExecRequest{Argv: append([]string{"mkdir", "-p", "--"}, dirs...), Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			return agent.Result{StopReason: agent.StopError}, fmt.Errorf("creating solution directories %v: exit %d %s: %v", dirs, res.ExitCode, res.Stderr, err)
		}
	}
	for _, n := range names {
		p := n
		if !path.IsAbs(p) {
			p = path.Join(t.Workdir, p)
		}
		if err := files.WriteFile(ctx, p, []byte(sol.Files[n]), 0o755); err != nil {
			return agent.Result{StopReason: agent.StopError}, fmt.Errorf("writing solution file %s: %w", p, err)
		}
	}
	script := sol.Command
	timeout := t.CommandTimeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if sol.Setup != "" {
		// Decoding and modes of the placed files are the harness's too.
		res, err := files.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", sol.Setup}, Workdir: t.Workdir, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			return agent.Result{StopReason: agent.StopError}, fmt.Errorf("preparing the solution files: exit %d %s: %v", res.ExitCode, res.Stderr, err)
		}
	}
	args, _ := json.Marshal(map[string]string{"command": script})
	emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: 1, ToolCall: &trajectory.ToolCall{ID: "oracle-1", Name: "oracle_solution", Arguments: args}})
	start := time.Now()
	res, err := t.Sandbox.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Workdir: t.Workdir, Env: sol.Env, Timeout: timeout})
	if err != nil {
		if ctx.Err() != nil {
			return agent.Result{StopReason: agent.StopCanceled}, ctx.Err()
		}
		return agent.Result{StopReason: agent.StopError}, fmt.Errorf("running the reference solution: %w", err)
	}
	code := res.ExitCode
	out := string(res.Stdout) + string(res.Stderr)
	emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: 1, DurationMS: time.Since(start).Milliseconds(), ToolResult: &trajectory.ToolResult{
		CallID: "oracle-1", Name: "oracle_solution", Output: out, ExitCode: &code, IsError: code != 0 || res.TimedOut, Truncated: res.Truncated,
	}})
	summary := fmt.Sprintf("reference solution exited %d", code)
	if res.TimedOut {
		summary = fmt.Sprintf("reference solution timed out after %s", timeout)
	}
	emit(trajectory.Event{Kind: trajectory.KindStop, Stop: &trajectory.Stop{Reason: agent.StopAnswered, Detail: summary}})
	// A failing solution is the task's outcome, for the checker to grade.
	return agent.Result{Output: summary, Steps: 0, StopReason: agent.StopAnswered}, nil
}

// Command gofixcalc is an example external harness written in Go: a minimal
// tool-calling loop (bash, read_file, write_file) that works on a coding
// task until the model answers without a tool call, and judges the result
// itself by running the tests. It reaches the sandbox and the model only
// through the worker (server.Worker), as every external harness must.
//
// The worker starts it for harness.external.command:
//
//	harness:
//	  external:
//	    command: [go, run, ../../harness/examples/gofixcalc]
//
// and it serves on $EVALSI_HARNESS_SOCKET until the worker stops it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"path"
	"strings"
	"time"

	"evals.si/harness/harnesspb"
	"evals.si/harness/server"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

const maxSteps = 30

var tools = []model.Tool{
	{Name: "bash", Description: "Run a shell command in the working directory; returns the exit code and output.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
	{Name: "read_file", Description: "Read a file (relative to the working directory).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
	{Name: "write_file", Description: "Replace a file's contents (relative to the working directory).",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)},
}

type fixcalc struct{}

func (fixcalc) Describe(context.Context) (server.Info, error) {
	return server.Info{Name: "gofixcalc", Version: "0.1.0", Capabilities: []string{harnesspb.CapabilityCheck}}, nil
}

func (fixcalc) Setup(context.Context, *server.Trial) error { return nil }

func (fixcalc) Teardown(context.Context, *server.Trial) error { return nil }

// Check runs the repository's tests; passing tests pass the trial.
func (fixcalc) Check(ctx context.Context, t *server.Trial) (*server.Verdict, error) {
	out, err := t.Worker.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"}, Workdir: t.Task.Workdir})
	if err != nil {
		return nil, err
	}
	v := &server.Verdict{Pass: out.ExitCode == 0, Details: lastLine(string(out.Stdout))}
	if v.Pass {
		v.Score = 1
	}
	return v, nil
}

func (fixcalc) Run(ctx context.Context, t *server.Trial, emit func(trajectory.Event) error) (server.Result, error) {
	system := fmt.Sprintf("You are a careful software engineer. Work in %s with the bash, read_file and write_file tools; answer without a tool call when done.", t.Task.Workdir)
	msgs := t.Task.Input
	if len(msgs) == 0 {
		msgs = []trajectory.Message{{Role: trajectory.RoleUser, Content: t.Task.Instruction}}
	}
	for _, m := range append([]trajectory.Message{{Role: trajectory.RoleSystem, Content: system}}, msgs...) {
		if err := emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &m}); err != nil {
			return server.Result{}, err
		}
	}
	output := ""
	for step := 1; step <= maxSteps; step++ {
		start := time.Now()
		resp, usd, err := t.Worker.ChatCost(ctx, model.Request{System: system, Messages: msgs, Tools: tools})
		if err != nil {
			return server.Result{}, fmt.Errorf("step %d: %w", step, err)
		}
		if err := emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: step, DurationMS: time.Since(start).Milliseconds(),
			ModelCall: &trajectory.ModelCall{Model: resp.Model, Usage: resp.Usage, CostUSD: usd, StopReason: resp.StopReason, Role: "agent"}}); err != nil {
			return server.Result{}, err
		}
		msg := resp.Message
		msg.Role = trajectory.RoleAssistant
		for i := range msg.ToolCalls {
			if msg.ToolCalls[i].ID == "" {
				msg.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", step, i)
			}
		}
		msgs = append(msgs, msg)
		if err := emit(trajectory.Event{Kind: trajectory.KindMessage, Step: step, Message: &msg}); err != nil {
			return server.Result{}, err
		}
		if msg.Content != "" {
			output = msg.Content
		}
		if len(msg.ToolCalls) == 0 {
			return server.Result{Output: output, StopReason: "answered"}, nil
		}
		for _, call := range msg.ToolCalls {
			if err := emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: step, ToolCall: &call}); err != nil {
				return server.Result{}, err
			}
			start := time.Now()
			res, err := runTool(ctx, t, call)
			if err != nil {
				return server.Result{}, fmt.Errorf("step %d, tool %s: %w", step, call.Name, err)
			}
			if err := emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: step, DurationMS: time.Since(start).Milliseconds(), ToolResult: &res}); err != nil {
				return server.Result{}, err
			}
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleTool, Content: res.Output, ToolCallID: call.ID, Name: call.Name})
		}
	}
	return server.Result{Output: output, StopReason: "max_steps"}, nil
}

// runTool runs one call. The model's mistakes (bad arguments, a missing
// file) become error results it can read; the error return is for the
// worker or the sandbox failing.
func runTool(ctx context.Context, t *server.Trial, call trajectory.ToolCall) (trajectory.ToolResult, error) {
	res := trajectory.ToolResult{CallID: call.ID, Name: call.Name}
	var args struct {
		Command, Path string
		Content       *string
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		res.IsError, res.Output = true, "arguments are not a JSON object: "+err.Error()
		return res, nil
	}
	p := args.Path
	if p != "" && !path.IsAbs(p) {
		p = path.Join(t.Task.Workdir, p)
	}
	switch {
	case call.Name == "bash" && args.Command != "":
		out, err := t.Worker.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", args.Command},
			Workdir: t.Task.Workdir, Timeout: t.Task.CommandTimeout})
		if err != nil {
			return res, err
		}
		code := out.ExitCode
		res.ExitCode = &code
		res.Output = fmt.Sprintf("exit code: %d\nstdout:\n%s\nstderr:\n%s", code, out.Stdout, out.Stderr)
	case call.Name == "read_file" && p != "":
		data, err := t.Worker.ReadFile(ctx, p)
		if err != nil {
			res.IsError, res.Output = true, err.Error()
			return res, nil
		}
		res.Output = string(data)
	case call.Name == "write_file" && p != "" && args.Content != nil:
		if err := t.Worker.WriteFile(ctx, p, []byte(*args.Content), 0o644); err != nil {
			res.IsError, res.Output = true, err.Error()
			return res, nil
		}
		res.Output = fmt.Sprintf("wrote %d bytes to %s", len(*args.Content), p)
	default:
		res.IsError, res.Output = true, fmt.Sprintf("unknown tool %q or missing arguments; the tools are bash(command), read_file(path), write_file(path, content)", call.Name)
	}
	return res, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func main() {
	if err := server.ServeEnv(context.Background(), fixcalc{}); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

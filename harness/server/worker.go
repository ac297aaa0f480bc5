package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"time"

	"google.golang.org/grpc"

	"evals.si/harness/harnesspb"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

// Worker is the client of the worker's callback service for one trial. It
// implements agent.Sandbox (Exec, ReadFile, WriteFile on the trial's
// sandbox) and model.Connector (Chat on the run's target model), so code
// written against those interfaces, such as the built-in agent, runs
// unchanged inside a harness.
type Worker struct {
	c    harnesspb.WorkerClient
	conn *grpc.ClientConn
}

// NewWorker wraps a connection to a Worker service (for tests and for
// harnesses that manage their own connections).
func NewWorker(conn *grpc.ClientConn) *Worker {
	return &Worker{c: harnesspb.NewWorkerClient(conn), conn: conn}
}

// Exec runs a command in the trial's sandbox. Denials are reported in the
// result; the worker records them as policy events itself.
func (w *Worker) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	resp, err := w.c.Exec(ctx, &harnesspb.ExecRequest{
		Argv: req.Argv, Env: req.Env, Workdir: req.Workdir, Stdin: req.Stdin,
		TimeoutMs: req.Timeout.Milliseconds(),
	})
	if err != nil {
		return sandbox.ExecResult{}, fmt.Errorf("worker exec: %w", err)
	}
	res := sandbox.ExecResult{
		ExitCode: int(resp.GetExitCode()), Stdout: resp.GetStdout(), Stderr: resp.GetStderr(),
		Truncated: resp.GetTruncated(), TimedOut: resp.GetTimedOut(),
		Duration: time.Duration(resp.GetDurationMs()) * time.Millisecond,
	}
	for _, d := range resp.GetDenials() {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: d.GetKind(), Detail: d.GetDetail()})
	}
	return res, nil
}

// ReadFile reads a file of the trial's sandbox.
func (w *Worker) ReadFile(ctx context.Context, path string) ([]byte, error) {
	resp, err := w.c.ReadFile(ctx, &harnesspb.ReadFileRequest{Path: path})
	if err != nil {
		return nil, fmt.Errorf("worker read %s: %w", path, err)
	}
	return resp.GetData(), nil
}

// WriteFile writes a file of the trial's sandbox.
func (w *Worker) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	if _, err := w.c.WriteFile(ctx, &harnesspb.WriteFileRequest{Path: path, Data: data, Mode: uint32(mode.Perm())}); err != nil {
		return fmt.Errorf("worker write %s: %w", path, err)
	}
	return nil
}

// Chat calls the run's target model. The worker picks the model and the
// record's script; req.Model, RecordID and Trial are ignored.
func (w *Worker) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	resp, _, err := w.ChatCost(ctx, req)
	return resp, err
}

// ChatCost is Chat that also returns the call's cost in USD as the worker
// priced it (0 when the model has no known price).
func (w *Worker) ChatCost(ctx context.Context, req model.Request) (model.Response, float64, error) {
	msgs, err := json.Marshal(req.Messages)
	if err != nil {
		return model.Response{}, 0, fmt.Errorf("encoding chat messages: %w", err)
	}
	preq := &harnesspb.ChatRequest{System: req.System, MessagesJson: msgs, MaxTokens: int32(req.MaxTokens), Temperature: req.Temperature}
	for _, t := range req.Tools {
		preq.Tools = append(preq.Tools, &harnesspb.Tool{Name: t.Name, Description: t.Description, ParametersJson: t.Parameters})
	}
	resp, err := w.c.Chat(ctx, preq)
	if err != nil {
		return model.Response{}, 0, fmt.Errorf("worker chat: %w", err)
	}
	out := model.Response{
		Usage:      trajectory.Usage{InputTokens: int(resp.GetInputTokens()), OutputTokens: int(resp.GetOutputTokens())},
		StopReason: resp.GetStopReason(),
		Model:      resp.GetModel(),
	}
	if err := json.Unmarshal(resp.GetMessageJson(), &out.Message); err != nil {
		return model.Response{}, 0, fmt.Errorf("decoding the worker's chat message: %w", err)
	}
	return out, resp.GetCostUsd(), nil
}

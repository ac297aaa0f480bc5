package external

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"evals.si/harness/harnesspb"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/trajectory"
)

// workerService is the callback service of one trial: the trial's sandbox
// and the run's model, as the harness may use them.
type workerService struct {
	harnesspb.UnimplementedWorkerServer
	tr *trial
}

// errNoSandbox answers a sandbox call of a trial that has none (the harness
// advertised no-sandbox).
var errNoSandbox = status.Error(codes.FailedPrecondition, "this trial has no sandbox: the harness advertised the no-sandbox capability")

// errOracle answers Worker.Chat in an oracle run: there is no model.
var errOracle = status.Error(codes.FailedPrecondition, "chat: the run's target is the oracle agent, which calls no model: answer with the task's reference solution (Task.oracle)")

func (w *workerService) Exec(ctx context.Context, req *harnesspb.ExecRequest) (*harnesspb.ExecResponse, error) {
	t := w.tr.task
	if t.Sandbox == nil {
		return nil, errNoSandbox
	}
	if len(req.GetArgv()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "exec: argv is empty")
	}
	er := sandbox.ExecRequest{Argv: req.GetArgv(), Env: req.GetEnv(), Workdir: req.GetWorkdir(), Stdin: req.GetStdin(),
		Timeout: time.Duration(req.GetTimeoutMs()) * time.Millisecond}
	if er.Workdir == "" {
		er.Workdir = t.Workdir
	}
	if er.Timeout <= 0 {
		er.Timeout = t.CommandTimeout
	}
	out, err := t.Sandbox.Exec(ctx, er)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "exec in the sandbox: %v", err)
	}
	resp := &harnesspb.ExecResponse{ExitCode: int32(out.ExitCode), Stdout: out.Stdout, Stderr: out.Stderr,
		Truncated: out.Truncated, TimedOut: out.TimedOut, DurationMs: out.Duration.Milliseconds()}
	for _, d := range out.Denials {
		resp.Denials = append(resp.Denials, &harnesspb.Denial{Kind: d.Kind, Detail: d.Detail})
		// The worker, not the harness, records what the sandbox refused.
		if err := w.tr.emit(trajectory.Event{Kind: trajectory.KindPolicy, Policy: &trajectory.Policy{Kind: d.Kind, Detail: d.Detail}}); err != nil {
			return nil, status.Errorf(codes.Internal, "%v", err)
		}
	}
	return resp, nil
}

func (w *workerService) ReadFile(ctx context.Context, req *harnesspb.ReadFileRequest) (*harnesspb.ReadFileResponse, error) {
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "read_file: path is empty")
	}
	if w.tr.task.Sandbox == nil {
		return nil, errNoSandbox
	}
	data, err := w.tr.task.Sandbox.ReadFile(ctx, req.GetPath())
	if err != nil {
		return nil, fileErr(ctx, "reading "+req.GetPath(), err)
	}
	return &harnesspb.ReadFileResponse{Data: data}, nil
}

func (w *workerService) WriteFile(ctx context.Context, req *harnesspb.WriteFileRequest) (*harnesspb.WriteFileResponse, error) {
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "write_file: path is empty")
	}
	if w.tr.task.Sandbox == nil {
		return nil, errNoSandbox
	}
	mode := fs.FileMode(req.GetMode()).Perm()
	if mode == 0 {
		mode = 0o644
	}
	if err := w.tr.task.Sandbox.WriteFile(ctx, req.GetPath(), req.GetData(), mode); err != nil {
		return nil, fileErr(ctx, "writing "+req.GetPath(), err)
	}
	return &harnesspb.WriteFileResponse{}, nil
}

// fileErr maps a sandbox file error to a status: NotFound and
// FailedPrecondition are the model's mistakes (a missing file, a
// directory), reported back to it; Internal is the sandbox failing.
func fileErr(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, fs.ErrNotExist):
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrInvalid), isDirErr(err):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", op, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

func isDirErr(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "is a directory"
}

func (w *workerService) Chat(ctx context.Context, req *harnesspb.ChatRequest) (*harnesspb.ChatResponse, error) {
	a, t := w.tr.a, w.tr.task
	if a.o.Oracle {
		return nil, errOracle
	}
	mr := model.Request{Model: a.o.Model, System: req.GetSystem(), MaxTokens: int(req.GetMaxTokens()),
		Temperature: req.Temperature, RecordID: t.RecordID, Trial: t.Trial}
	if err := json.Unmarshal(req.GetMessagesJson(), &mr.Messages); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "chat: messages_json is not a JSON array of messages: %v", err)
	}
	for _, tool := range req.GetTools() {
		if tool.GetName() == "" {
			return nil, status.Error(codes.InvalidArgument, "chat: a tool has no name")
		}
		params := tool.GetParametersJson()
		if len(params) > 0 && !json.Valid(params) {
			return nil, status.Errorf(codes.InvalidArgument, "chat: tool %q: parameters_json is not valid JSON", tool.GetName())
		}
		mr.Tools = append(mr.Tools, model.Tool{Name: tool.GetName(), Description: tool.GetDescription(), Parameters: params})
	}
	resp, err := a.o.Connector.Chat(ctx, mr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		// The provider's error text, never the credentials: connectors do
		// not put keys in errors.
		return nil, status.Errorf(codes.Unavailable, "chat: %v", err)
	}
	var usd float64
	if a.o.Pricing != nil {
		for _, name := range []string{resp.Model, a.o.Model} {
			if name == "" {
				continue
			}
			if c, ok := a.o.Pricing.Cost(name, resp.Usage); ok {
				usd = c
				break
			}
		}
	}
	w.tr.meter(resp.Usage, usd)
	decodableArguments(&resp.Message)
	msg, err := json.Marshal(resp.Message)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "chat: encoding the reply: %v", err)
	}
	name := resp.Model
	if name == "" {
		name = a.o.Model
	}
	return &harnesspb.ChatResponse{MessageJson: msg, InputTokens: int64(resp.Usage.InputTokens),
		OutputTokens: int64(resp.Usage.OutputTokens), StopReason: resp.StopReason, Model: name, CostUsd: usd}, nil
}

package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	"evals.si/agent"
	"evals.si/harness/harnesspb"
	"evals.si/trajectory"
)

// Run runs one trial: Setup, Run (the streamed events join the trajectory),
// Check when the harness has the check capability, and Teardown, which runs
// whenever Setup was called. The harness's verdict, if any, is returned in
// Result.Verdict; the engine uses it only when the spec has no
// environment.checker.
func (a *Agent) Run(ctx context.Context, t agent.Task) (res agent.Result, err error) {
	if t.Sandbox == nil && a.NeedsSandbox() {
		return agent.Result{}, errors.New("external harness: task has no sandbox")
	}
	if t.Emit == nil {
		return agent.Result{}, errors.New("external harness: task has no event sink")
	}
	trialID := fmt.Sprintf("%s/%d/%d", t.RecordID, t.Trial, a.seq.Add(1))
	tr := &trial{a: a, task: &t}

	// The callback service for this trial, on a socket only this user can
	// reach.
	dir, err := privateDir("evalsi-worker-")
	if err != nil {
		return agent.Result{}, err
	}
	defer removeAll(dir)
	sock := filepath.Join(dir, "worker.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return agent.Result{}, fmt.Errorf("listening for the harness's worker calls on %s: %w", sock, err)
	}
	gs := grpc.NewServer()
	harnesspb.RegisterWorkerServer(gs, &workerService{tr: tr})
	go gs.Serve(lis)
	defer gs.Stop()

	if err := tr.emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf(
		"external harness %s %s (protocol %s, %s form)", a.info.GetName(), a.info.GetVersion(), a.info.GetProtocolVersion(), a.form)}}); err != nil {
		return agent.Result{}, err
	}

	input, err := json.Marshal(t.Input)
	if err != nil {
		return agent.Result{}, fmt.Errorf("encoding the task's input messages: %w", err)
	}
	if t.Input == nil {
		input = nil
	}
	var meta []byte
	if len(t.Metadata) > 0 {
		if meta, err = json.Marshal(t.Metadata); err != nil {
			return agent.Result{}, fmt.Errorf("encoding the record's metadata: %w", err)
		}
	}
	setup := &harnesspb.SetupRequest{TrialId: trialID, WorkerAddress: "unix://" + sock, Task: &harnesspb.Task{
		RecordId: t.RecordID, Trial: int32(t.Trial), Instruction: t.Instruction, InputJson: input,
		Workdir: t.Workdir, CommandTimeoutMs: t.CommandTimeout.Milliseconds(), Model: a.o.Model,
		MetadataJson: meta, Oracle: a.o.Oracle,
	}}
	// Teardown always runs once Setup was called, with a context that
	// outlives a canceled trial.
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.o.TeardownTimeout)
		defer cancel()
		if _, terr := a.client.Teardown(tctx, &harnesspb.TeardownRequest{TrialId: trialID}); terr != nil {
			terr = fmt.Errorf("external harness: teardown: %w", terr)
			if err == nil {
				res, err = tr.fail(terr)
			} else {
				err = errors.Join(err, terr)
			}
		}
	}()
	if _, err := a.client.Setup(ctx, setup); err != nil {
		return tr.fail(fmt.Errorf("external harness: setup: %w", err))
	}

	out, err := tr.run(ctx, trialID)
	if err != nil {
		return tr.fail(err)
	}
	res = tr.result()
	res.Output, res.StopReason = out.GetOutput(), out.GetStopReason()
	if res.StopReason == "" {
		res.StopReason = agent.StopAnswered
	}
	if !tr.stopped {
		if err := tr.emit(trajectory.Event{Kind: trajectory.KindStop, Step: res.Steps, Stop: &trajectory.Stop{Reason: res.StopReason}}); err != nil {
			return tr.fail(err)
		}
	}

	if a.hasCapability(harnesspb.CapabilityCheck) {
		resp, err := a.client.Check(ctx, &harnesspb.CheckRequest{TrialId: trialID})
		if err != nil {
			return tr.fail(fmt.Errorf("external harness: check: %w", err))
		}
		v := resp.GetVerdict()
		if v != nil {
			if v.GetScore() < 0 || v.GetScore() > 1 {
				return tr.fail(fmt.Errorf("external harness: check: verdict score %v is outside [0, 1]", v.GetScore()))
			}
			res.Verdict = &trajectory.Checker{Pass: v.GetPass(), Score: v.GetScore(), Details: v.GetDetails(),
				Output: "verdict of external harness " + a.info.GetName()}
		}
	}
	return res, nil
}

// trial is the worker's state of one trial: the event sink, shared by the
// Run stream and the callback service, and the metering of Worker.Chat.
type trial struct {
	a    *Agent
	task *agent.Task

	mu      sync.Mutex
	usage   trajectory.Usage
	cost    float64
	calls   int
	stopped bool // the harness streamed a stop event
}

// emit appends an event to the trajectory. Events from the Run stream and
// the worker's own (policy events of Worker.Exec) are serialized here, in
// the order they arrive.
func (tr *trial) emit(e trajectory.Event) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Seq = 0 // the engine's sink numbers events
	if e.Kind == trajectory.KindStop {
		tr.stopped = true
	}
	if err := tr.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

func (tr *trial) meter(u trajectory.Usage, usd float64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.usage = tr.usage.Add(u)
	tr.cost += usd
	tr.calls++
}

func (tr *trial) result() agent.Result {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return agent.Result{Usage: tr.usage, CostUSD: tr.cost, Steps: tr.calls}
}

// fail records an infrastructure error (best effort: the sink may be what
// failed) and returns it with what was metered so far.
func (tr *trial) fail(err error) (agent.Result, error) {
	res := tr.result()
	res.StopReason = agent.StopError
	if errors.Is(err, context.Canceled) {
		res.StopReason = agent.StopCanceled
	}
	_ = tr.emit(trajectory.Event{Kind: trajectory.KindError, Error: &trajectory.Error{Kind: "harness", Message: err.Error()}})
	if !tr.stopped {
		_ = tr.emit(trajectory.Event{Kind: trajectory.KindStop, Stop: &trajectory.Stop{Reason: res.StopReason, Detail: err.Error()}})
	}
	return res, err
}

// run reads the Run stream to its result.
func (tr *trial) run(ctx context.Context, trialID string) (*harnesspb.RunResult, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := tr.a.client.Run(rctx, &harnesspb.RunRequest{TrialId: trialID})
	if err != nil {
		return nil, fmt.Errorf("external harness: run: %w", err)
	}
	n := 0
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("external harness: run: the stream ended after %d events without a result", n)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("external harness: run: %w", ctx.Err())
			}
			return nil, fmt.Errorf("external harness: run (after %d events): %w", n, err)
		}
		switch k := msg.GetKind().(type) {
		case *harnesspb.RunMessage_EventJson:
			n++
			e, err := decodeEvent(k.EventJson)
			if err != nil {
				return nil, fmt.Errorf("external harness: run: event %d: %w", n, err)
			}
			if err := tr.emit(e); err != nil {
				return nil, err
			}
		case *harnesspb.RunMessage_Result:
			// The result ends the stream; anything after it is ignored.
			return k.Result, nil
		default:
			return nil, fmt.Errorf("external harness: run: message %d carries neither an event nor a result", n+1)
		}
	}
}

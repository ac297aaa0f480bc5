// Package server is the Go library for writing an external harness: a
// harness implements Harness, and Serve speaks the harness protocol
// (evals.si/harness/harnesspb) for it. Each trial gets a Worker, the client
// of the worker's callback service, through which the harness runs commands
// in the trial's sandbox and calls the run's model: a harness never runs
// anything on its own host on the model's behalf, and never holds provider
// credentials.
//
// A command-form harness (harness.external.command) is a program whose
// main calls ServeEnv: it serves on the unix socket the worker names in
// $EVALSI_HARNESS_SOCKET until the worker stops it.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"evals.si/harness/harnesspb"
	"evals.si/trajectory"
)

// Harness is what a harness author implements. The worker calls Describe,
// then for each trial Setup, Run, Check and Teardown, in that order;
// Teardown is called whenever Setup was, even when a later call failed.
// Trials may run concurrently: methods must be safe for concurrent use
// across trials.
type Harness interface {
	Describe(ctx context.Context) (Info, error)
	// Setup prepares a trial; t.Worker is connected.
	Setup(ctx context.Context, t *Trial) error
	// Run works on the task, calling emit for every trajectory event as it
	// happens. An error is an infrastructure failure of the trial (never a
	// failed task: the checker decides that).
	Run(ctx context.Context, t *Trial, emit func(trajectory.Event) error) (Result, error)
	// Check returns the harness's own verdict, or nil when it has none.
	Check(ctx context.Context, t *Trial) (*Verdict, error)
	// Teardown releases what Setup made.
	Teardown(ctx context.Context, t *Trial) error
}

// Info describes a harness. The protocol version is filled in by Serve.
type Info struct {
	Name    string
	Version string
	// Capabilities: harnesspb.CapabilityCheck when Check gives verdicts,
	// harnesspb.CapabilityNoSandbox when the harness never uses the sandbox.
	Capabilities []string
}

// Task is the trial's task.
type Task struct {
	RecordID    string
	Trial       int
	Instruction string
	// Input is the record's messages, when it has messages.
	Input   []trajectory.Message
	Workdir string
	// CommandTimeout bounds one command (0: the sandbox's default).
	CommandTimeout time.Duration
	// Model is the target model Worker.Chat calls.
	Model string
	// Metadata is the record's metadata (what a benchmark importer put
	// there for its harness).
	Metadata map[string]json.RawMessage
	// Oracle: the run's target is the oracle agent; answer with the task's
	// reference solution (Worker.Chat fails).
	Oracle bool
}

// Trial is one trial as the harness sees it.
type Trial struct {
	ID     string
	Task   Task
	Worker *Worker
	// State is the harness's own per-trial state, set in Setup as it likes.
	State any
}

// Result is how a run ended.
type Result struct {
	Output string
	// StopReason is one of agent.Stop* (answered, max_steps, ...).
	StopReason string
}

// Verdict is the harness's own judgement of the trial.
type Verdict struct {
	Pass    bool
	Score   float64
	Details string
}

// ServeEnv serves h on the unix socket named by $EVALSI_HARNESS_SOCKET until
// ctx is done or the process gets SIGTERM or SIGINT: the main of a
// command-form harness.
func ServeEnv(ctx context.Context, h Harness) error {
	path := os.Getenv(harnesspb.SocketEnv)
	if path == "" {
		return fmt.Errorf("%s is not set: this program is a harness the Evals.si worker starts (harness.external.command)", harnesspb.SocketEnv)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Serve(ctx, lis, h)
}

// Serve serves h on lis until ctx is done, then stops gracefully (in-flight
// calls are canceled after a grace period). It returns nil when ctx ended it.
func Serve(ctx context.Context, lis net.Listener, h Harness) error {
	gs := grpc.NewServer()
	harnesspb.RegisterHarnessServer(gs, New(h))
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		t := time.AfterFunc(5*time.Second, gs.Stop)
		defer t.Stop()
		gs.GracefulStop()
	}()
	err := gs.Serve(lis)
	if ctx.Err() != nil {
		<-done
		return nil
	}
	gs.Stop()
	return err
}

// Service adapts a Harness to the generated HarnessServer, for callers that
// run their own grpc.Server.
type Service struct {
	harnesspb.UnimplementedHarnessServer
	h Harness

	mu     sync.Mutex
	trials map[string]*Trial
}

// New returns the protocol service for h.
func New(h Harness) *Service {
	return &Service{h: h, trials: map[string]*Trial{}}
}

// Describe implements harnesspb.HarnessServer.
func (s *Service) Describe(ctx context.Context, _ *harnesspb.DescribeRequest) (*harnesspb.DescribeResponse, error) {
	info, err := s.h.Describe(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "describe: %v", err)
	}
	return &harnesspb.DescribeResponse{Name: info.Name, Version: info.Version,
		ProtocolVersion: harnesspb.ProtocolVersion, Capabilities: info.Capabilities}, nil
}

// Setup implements harnesspb.HarnessServer.
func (s *Service) Setup(ctx context.Context, req *harnesspb.SetupRequest) (*harnesspb.SetupResponse, error) {
	if req.GetTrialId() == "" {
		return nil, status.Error(codes.InvalidArgument, "setup: trial_id is empty")
	}
	pt := req.GetTask()
	task := Task{
		RecordID: pt.GetRecordId(), Trial: int(pt.GetTrial()), Instruction: pt.GetInstruction(),
		Workdir: pt.GetWorkdir(), CommandTimeout: time.Duration(pt.GetCommandTimeoutMs()) * time.Millisecond,
		Model: pt.GetModel(), Oracle: pt.GetOracle(),
	}
	if len(pt.GetMetadataJson()) > 0 {
		if err := json.Unmarshal(pt.GetMetadataJson(), &task.Metadata); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "setup: task.metadata_json is not a JSON object: %v", err)
		}
	}
	if len(pt.GetInputJson()) > 0 {
		if err := json.Unmarshal(pt.GetInputJson(), &task.Input); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "setup: task.input_json is not a JSON array of messages: %v", err)
		}
	}
	conn, err := grpc.NewClient(req.GetWorkerAddress(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "setup: connecting to the worker at %q: %v", req.GetWorkerAddress(), err)
	}
	t := &Trial{ID: req.GetTrialId(), Task: task, Worker: &Worker{c: harnesspb.NewWorkerClient(conn), conn: conn}}
	s.mu.Lock()
	if _, dup := s.trials[t.ID]; dup {
		s.mu.Unlock()
		conn.Close()
		return nil, status.Errorf(codes.AlreadyExists, "setup: trial %q is already set up", t.ID)
	}
	s.trials[t.ID] = t
	s.mu.Unlock()
	if err := s.h.Setup(ctx, t); err != nil {
		return nil, status.Errorf(codes.Internal, "setup: %v", err)
	}
	return &harnesspb.SetupResponse{}, nil
}

func (s *Service) trial(id string) (*Trial, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trials[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "trial %q was not set up", id)
	}
	return t, nil
}

// Run implements harnesspb.HarnessServer.
func (s *Service) Run(req *harnesspb.RunRequest, stream grpc.ServerStreamingServer[harnesspb.RunMessage]) error {
	t, err := s.trial(req.GetTrialId())
	if err != nil {
		return err
	}
	var mu sync.Mutex
	emit := func(e trajectory.Event) error {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encoding %s event: %w", e.Kind, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if err := stream.Send(&harnesspb.RunMessage{Kind: &harnesspb.RunMessage_EventJson{EventJson: b}}); err != nil {
			return fmt.Errorf("sending %s event to the worker: %w", e.Kind, err)
		}
		return nil
	}
	res, err := s.h.Run(stream.Context(), t, emit)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return err
		}
		return status.Errorf(codes.Internal, "run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return stream.Send(&harnesspb.RunMessage{Kind: &harnesspb.RunMessage_Result{Result: &harnesspb.RunResult{
		Output: res.Output, StopReason: res.StopReason}}})
}

// Check implements harnesspb.HarnessServer.
func (s *Service) Check(ctx context.Context, req *harnesspb.CheckRequest) (*harnesspb.CheckResponse, error) {
	t, err := s.trial(req.GetTrialId())
	if err != nil {
		return nil, err
	}
	v, err := s.h.Check(ctx, t)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check: %v", err)
	}
	if v == nil {
		return &harnesspb.CheckResponse{}, nil
	}
	return &harnesspb.CheckResponse{Verdict: &harnesspb.Verdict{Pass: v.Pass, Score: v.Score, Details: v.Details}}, nil
}

// Teardown implements harnesspb.HarnessServer. The trial is forgotten and
// its worker connection closed even when the harness's Teardown fails.
func (s *Service) Teardown(ctx context.Context, req *harnesspb.TeardownRequest) (*harnesspb.TeardownResponse, error) {
	s.mu.Lock()
	t, ok := s.trials[req.GetTrialId()]
	delete(s.trials, req.GetTrialId())
	s.mu.Unlock()
	if !ok {
		// Setup failed before the trial was known, or it was torn down
		// already: nothing to release.
		return &harnesspb.TeardownResponse{}, nil
	}
	err := s.h.Teardown(ctx, t)
	err = errors.Join(err, t.Worker.conn.Close())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "teardown: %v", err)
	}
	return &harnesspb.TeardownResponse{}, nil
}

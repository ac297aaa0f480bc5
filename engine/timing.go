package engine

import (
	"context"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"evals.si/agent/remote"
	"evals.si/model"
	"evals.si/sandbox"
)

// Timing splits a trial's wall time between the model, the sandbox and the
// engine itself, so that throughput work can see where time goes. It is
// measured, never recorded as a score.
type Timing struct {
	// Total is the attempt's wall time.
	Total time.Duration `json:"total"`
	// Model is the time spent in model calls of the target (Connector.Chat).
	Model time.Duration `json:"model"`
	// Sandbox is the time spent preparing the environment, creating the
	// sandbox, executing and reading/writing files in it (agent tools, diff,
	// checker) and closing it.
	Sandbox time.Duration `json:"sandbox"`
	// SandboxLifecycle is the part of Sandbox spent preparing the
	// environment, creating the sandbox and closing it.
	SandboxLifecycle time.Duration `json:"sandbox_lifecycle"`
	// SandboxCalls counts execs and file reads/writes in the sandbox.
	SandboxCalls int `json:"sandbox_calls"`
	// Steps is the number of agent steps (model calls).
	Steps int `json:"steps"`
	// Spans are the timed parts of the attempt no trajectory event
	// records, in the order they ended, for the trace export: the
	// environment's setup, the sandbox's creation, each evaluator, and the
	// model calls no event records (a failed call; the judge's).
	Spans []Span `json:"-"`
}

// Span names (Span.Name).
const (
	// SpanSetup: preparing the environment (image, setup commands).
	SpanSetup = "setup"
	// SpanCheckerPreflight: the checker's run on the untouched environment.
	SpanCheckerPreflight = "checker_preflight"
	// SpanSandbox: creating the agent's sandbox; SpanCheckerSandbox the
	// fresh one a checker with fresh: true runs in.
	SpanSandbox        = "sandbox"
	SpanCheckerSandbox = "checker_sandbox"
	// SpanEvaluator: one evaluator scoring the trial (Span.Evaluator).
	SpanEvaluator = "evaluator"
	// SpanModelCall: a model call (Span.Call); Span.Evaluator names the
	// evaluator whose judge made it, empty for the target's failed calls.
	SpanModelCall = "model_call"
	// SpanAgentCall: one call to a remote agent (a2a, mcp, http,
	// responses): a turn of the conversation.
	SpanAgentCall = "agent_call"
)

// Span is one timed part of an attempt (Timing.Spans).
type Span struct {
	Name       string
	Start, End time.Time
	// Err is set when the part failed; ErrorType classifies a failed model
	// call (model.ErrorType).
	Err, ErrorType string
	Evaluator      string
	Call           *model.Call
}

// Overhead is the engine's own time: Total less model and sandbox time
// (scheduling, recording events and results, evaluators, the agent loop).
func (t Timing) Overhead() time.Duration { return max(t.Total-t.Model-t.Sandbox, 0) }

// meter accumulates one attempt's model and sandbox time. Calls may overlap
// (a judge evaluating while nothing else runs, say), so it adds atomically.
type meter struct {
	model, sandbox, lifecycle atomic.Int64
	steps, calls              atomic.Int64

	mu    sync.Mutex
	spans []Span
}

type meterKey struct{}

// withMeter also observes the trial's model calls: a failed one records no
// event, so the meter keeps it as a span.
func withMeter(ctx context.Context, m *meter) context.Context {
	ctx = model.WithCallObserver(ctx, func(c model.Call) {
		if c.Err != nil {
			m.addCall("", c)
		}
	})
	ctx = remote.WithCallObserver(ctx, func(c remote.Call) {
		s := Span{Name: SpanAgentCall, Start: c.Start, End: c.End}
		if c.Err != nil {
			s.Err = c.Err.Error()
		}
		m.mu.Lock()
		m.spans = append(m.spans, s)
		m.mu.Unlock()
	})
	return context.WithValue(ctx, meterKey{}, m)
}

// span records a timed part of the attempt that ended now.
func (m *meter) span(name string, start time.Time, err error) {
	if m == nil {
		return
	}
	s := Span{Name: name, Start: start, End: time.Now()}
	if err != nil {
		s.Err = err.Error()
	}
	m.mu.Lock()
	m.spans = append(m.spans, s)
	m.mu.Unlock()
}

func (m *meter) addCall(evaluator string, c model.Call) {
	s := Span{Name: SpanModelCall, Start: c.Start, End: c.End, Evaluator: evaluator, Call: &c}
	if c.Err != nil {
		s.Err, s.ErrorType = c.Err.Error(), model.ErrorType(c.Err)
	}
	m.mu.Lock()
	m.spans = append(m.spans, s)
	m.mu.Unlock()
}

// evaluatorSpan times one evaluator and keeps its judge's calls: call
// done with the evaluator's error when it returns.
func evaluatorSpan(ctx context.Context, name string) (context.Context, func(error)) {
	m := meterFrom(ctx)
	if m == nil {
		return ctx, func(error) {}
	}
	start := time.Now()
	ctx = model.WithCallObserver(ctx, func(c model.Call) { m.addCall(name, c) })
	return ctx, func(err error) {
		s := Span{Name: SpanEvaluator, Start: start, End: time.Now(), Evaluator: name}
		if err != nil {
			s.Err = err.Error()
		}
		m.mu.Lock()
		m.spans = append(m.spans, s)
		m.mu.Unlock()
	}
}

func meterFrom(ctx context.Context) *meter {
	m, _ := ctx.Value(meterKey{}).(*meter)
	return m
}

// sinceInto adds the time since start to the counter, when there is one.
func sinceInto(c *atomic.Int64, start time.Time) {
	if c != nil {
		c.Add(int64(time.Since(start)))
	}
}

func (m *meter) modelCounter() *atomic.Int64 {
	if m == nil {
		return nil
	}
	return &m.model
}

// lifecycle adds the time since start to both the sandbox time and its
// lifecycle part.
func (m *meter) lifecycleSince(start time.Time) {
	if m != nil {
		d := int64(time.Since(start))
		m.sandbox.Add(d)
		m.lifecycle.Add(d)
	}
}

func (m *meter) timing(total time.Duration) Timing {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Timing{
		Total: total, Model: time.Duration(m.model.Load()), Sandbox: time.Duration(m.sandbox.Load()),
		SandboxLifecycle: time.Duration(m.lifecycle.Load()), SandboxCalls: int(m.calls.Load()), Steps: int(m.steps.Load()),
		Spans: slices.Clone(m.spans),
	}
}

// TimedConnector measures the connector's calls into the trial's Timing
// (Outcome.Timing); outside a trial it only delegates.
func TimedConnector(c model.Connector) model.Connector { return timedConnector{c} }

type timedConnector struct{ model.Connector }

func (c timedConnector) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	m := meterFrom(ctx)
	if m != nil {
		m.steps.Add(1)
	}
	defer sinceInto(m.modelCounter(), time.Now())
	return c.Connector.Chat(ctx, req)
}

// timedSandbox measures the sandbox calls the agent, the diff and the
// checker make.
type timedSandbox struct {
	sandbox.Sandbox
	m *meter
}

func (s timedSandbox) call(start time.Time) {
	if s.m != nil {
		s.m.calls.Add(1)
		s.m.sandbox.Add(int64(time.Since(start)))
	}
}

func (s timedSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	defer s.call(time.Now())
	return s.Sandbox.Exec(ctx, req)
}

func (s timedSandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	defer s.call(time.Now())
	return s.Sandbox.ReadFile(ctx, path)
}

func (s timedSandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	defer s.call(time.Now())
	return s.Sandbox.WriteFile(ctx, path, data, mode)
}

func (s timedSandbox) Close(ctx context.Context) error {
	defer s.m.lifecycleSince(time.Now())
	return s.Sandbox.Close(ctx)
}

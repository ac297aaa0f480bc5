// Package builtin is the built-in tool-calling agent (harness.builtin): a
// loop of model calls and tool calls in the task's sandbox that ends when
// the model answers without a tool call or a stop condition hits.
//
// Semantics worth knowing:
//   - Steps are model calls, numbered from 1; every event of a step (the
//     model call, the assistant message, tool calls and results, escalations
//     and policy events) carries its number. The opening system and user
//     messages carry step 0.
//   - max_steps (default 30) bounds model calls. Budgets are checked after
//     each model call: when tokens or USD spent reach budget.tokens or
//     budget.usd, no further model call is made. The tool calls of the
//     response that reached the budget still run, because they are already
//     paid for. budget.wall_clock bounds the whole loop; when it elapses the
//     run stops with reason wall_clock, which is a result, not an error.
//   - Spend comes from harness.builtin.pricing (per model, USD per million
//     tokens), else from the Pricer the engine passes (the default table).
//     A budget.usd with no price for the model is an error: the budget could
//     not be enforced.
//   - The bash tool runs its command with bash when the sandbox has it, else
//     /bin/sh, in the workdir, bounded by the task's command timeout.
//
// Tool-call protocols (harness.builtin.tool_call_mode and tool_call_format;
// the formats and their parsing rules are in package toolcall):
//   - The protocol is resolved once per Agent, at its first Run (or by an
//     explicit call of Protocol), with toolcall.Resolve; auto and native
//     probe the endpoint with model.ProbeNativeTools. Forcing native on an
//     endpoint without native tools fails the run before any step.
//   - native: the tools go to the API and structured calls come back; a
//     reply with no structured call but native_json call text in its
//     content (a server that left the model's own format unparsed) is
//     parsed with the native_json parser. Results go back as tool messages.
//   - prompted: no tools are sent to the API. The system prompt states the
//     format and lists the tools (fenced_shell offers bash only); calls are
//     parsed from the reply's text, and structured calls, if an endpoint
//     returns any, are ignored. The assistant message is recorded with the
//     parsed calls, but goes back to the model as the text it wrote; the
//     step's results go back as one user message of <tool_result> blocks
//     (toolcall.ResultsMessage).
//   - In both modes, calls the protocol marks but that cannot be read are
//     not run: they are recorded as log events and reported back to the
//     model, and the loop goes on (a reply with neither calls nor such
//     problems ends the run).
package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"evals.si/agent"
	"evals.si/agent/toolcall"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// DefaultMaxSteps bounds model calls when harness.builtin.max_steps is 0.
const DefaultMaxSteps = 30

// Pricer prices a model's usage in USD; ok is false when the model has no
// known price. model.Pricing implements it.
type Pricer interface {
	Cost(model string, u trajectory.Usage) (usd float64, ok bool)
}

// Agent is the built-in tool-calling agent. It is safe for concurrent Runs.
type Agent struct {
	conn    model.Connector
	model   string
	cfg     spec.Builtin
	pricing Pricer
	log     *slog.Logger

	// mu guards proto, the protocol resolved at the first Run.
	mu    sync.Mutex
	proto *toolcall.Protocol
	// extra holds harness.builtin.tools (extra.go).
	extra extra
}

var _ agent.Agent = (*Agent)(nil)

// New returns the built-in agent on conn. modelName is sent with every call
// (empty: the connector's configured model). pricing may be nil, in which
// case only cfg.Pricing prices usage; logger may be nil.
func New(conn model.Connector, modelName string, cfg spec.Builtin, pricing Pricer, logger *slog.Logger) *Agent {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Agent{conn: conn, model: modelName, cfg: cfg, pricing: pricing, log: logger}
}

// Protocol resolves the run's tool-call protocol from tool_call_mode and
// tool_call_format, probing the endpoint when the mode asks for it. The
// first success is kept for the Agent's life, so a run probes once; a
// failure is not kept, so the next Run tries again. Callers may call it
// before the first Run to fail a misconfigured run at its start.
func (a *Agent) Protocol(ctx context.Context) (toolcall.Protocol, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proto != nil {
		return *a.proto, nil
	}
	p, err := toolcall.Resolve(ctx, a.cfg.ToolCallMode, a.cfg.ToolCallFormat, func(ctx context.Context) (model.NativeTools, error) {
		return model.ProbeNativeTools(ctx, a.conn, a.model)
	})
	if err != nil {
		return toolcall.Protocol{}, err
	}
	a.log.Info("tool-call protocol", "mode", p.Mode, "format", p.Format, "reason", p.Reason)
	a.proto = &p
	return p, nil
}

// cost prices usage under the first name that has a price: the model the
// response reports, then the model that was asked for.
func (a *Agent) cost(names []string, u trajectory.Usage) (float64, bool) {
	for _, n := range names {
		if n == "" {
			continue
		}
		if p, ok := a.cfg.Pricing[n]; ok {
			return (float64(u.InputTokens)*p.Input + float64(u.OutputTokens)*p.Output) / 1e6, true
		}
	}
	if a.pricing != nil {
		for _, n := range names {
			if n == "" {
				continue
			}
			if c, ok := a.pricing.Cost(n, u); ok {
				return c, true
			}
		}
	}
	return 0, false
}

// run is the state of one Run.
type run struct {
	a     *Agent
	task  *agent.Task
	log   *slog.Logger
	res   agent.Result
	steps int
	// dialog is the conversation as the user simulator sees it (conversation.go).
	dialog []trajectory.Message
}

func (r *run) emit(e trajectory.Event) error {
	e.Time = time.Now()
	if err := r.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

// stop records why the loop ended and returns the result.
func (r *run) stop(reason, detail string) (agent.Result, error) {
	r.res.StopReason = reason
	r.res.Steps = r.steps
	r.log.Debug("builtin agent stopped", "reason", reason, "steps", r.steps, "tokens", r.res.Usage.Total(), "cost_usd", r.res.CostUSD)
	if err := r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps,
		Stop: &trajectory.Stop{Reason: reason, Detail: detail}}); err != nil {
		return r.res, err
	}
	return r.res, nil
}

// modelError is a failed model call. The engine files it under the error
// kind model, as it does a plain run's, rather than under agent; its text
// says where the call was, the kind is shown beside it.
type modelError struct{ err error }

func (e *modelError) Error() string     { return e.err.Error() }
func (e *modelError) Unwrap() error     { return e.err }
func (e *modelError) ErrorKind() string { return "model" }

// fail records an infrastructure error (best effort: the sink may be what
// failed) and returns it.
func (r *run) fail(kind string, err error) (agent.Result, error) {
	r.res.StopReason = agent.StopError
	r.res.Steps = r.steps
	_ = r.emit(trajectory.Event{Kind: trajectory.KindError, Step: r.steps,
		Error: &trajectory.Error{Kind: kind, Message: err.Error()}})
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps,
		Stop: &trajectory.Stop{Reason: agent.StopError, Detail: err.Error()}})
	return r.res, err
}

// interrupted ends the run when a context is done: the caller's (canceled,
// an error) or the wall clock budget's (a stop, not an error).
func (r *run) interrupted(parent, loop context.Context) (agent.Result, bool, error) {
	if err := parent.Err(); err != nil {
		r.res.StopReason = agent.StopCanceled
		r.res.Steps = r.steps
		_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps,
			Stop: &trajectory.Stop{Reason: agent.StopCanceled, Detail: err.Error()}})
		return r.res, true, err
	}
	if loop.Err() != nil {
		res, err := r.stop(agent.StopWallClock, fmt.Sprintf("budget.wall_clock of %s elapsed", r.a.cfg.Budget.WallClock.D()))
		return res, true, err
	}
	return agent.Result{}, false, nil
}

// Run works on the task until the model answers or a stop condition hits.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	if t.Sandbox == nil {
		return agent.Result{}, errors.New("builtin agent: task has no sandbox")
	}
	if t.Emit == nil {
		return agent.Result{}, errors.New("builtin agent: task has no event sink")
	}
	var budget spec.Budget
	if a.cfg.Budget != nil {
		budget = *a.cfg.Budget
	}
	if budget.USD > 0 && a.model != "" {
		if _, ok := a.cost([]string{a.model}, trajectory.Usage{}); !ok {
			return agent.Result{}, fmt.Errorf("harness.builtin.budget.usd is set but no price is known for model %q: add it under harness.builtin.pricing (USD per million input and output tokens)", a.model)
		}
	}
	maxSteps := a.cfg.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	loop := ctx
	if budget.WallClock > 0 {
		var cancel context.CancelFunc
		loop, cancel = context.WithTimeout(ctx, budget.WallClock.D())
		defer cancel()
	}

	r := &run{a: a, task: &t, log: a.log.With("record", t.RecordID, "trial", t.Trial)}

	proto, err := a.Protocol(ctx)
	if err != nil {
		return r.fail("config", err)
	}
	trialTools, err := a.openTools(ctx)
	if err != nil {
		return r.fail("tools", err)
	}
	defer r.closeTools(trialTools)
	tools := a.allTools()
	apiTools := tools
	if proto.Mode == toolcall.ModePrompted {
		tools = toolcall.Tools(proto.Format, tools)
		apiTools = nil
	}

	// The opening conversation: the record's messages when it has them
	// (system messages join the system prompt), else the instruction.
	var recordSystem []string
	var msgs []trajectory.Message
	for _, m := range t.Input {
		if m.Role == trajectory.RoleSystem {
			recordSystem = append(recordSystem, m.Content)
			continue
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		if strings.TrimSpace(t.Instruction) == "" {
			return agent.Result{}, fmt.Errorf("builtin agent: record %q has no instruction", t.RecordID)
		}
		msgs = []trajectory.Message{{Role: trajectory.RoleUser, Content: t.Instruction}}
	}
	system := systemPrompt(t.Workdir, proto, tools, recordSystem, a.cfg.Instructions)
	opening := append([]trajectory.Message{{Role: trajectory.RoleSystem, Content: system}}, msgs...)
	for i := range opening {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &opening[i]}); err != nil {
			return r.fail("store", err)
		}
	}
	if a.cfg.ToolCallMode != "" || a.cfg.ToolCallFormat != "" {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{
			Text: fmt.Sprintf("tool-call protocol: %s %s (%s)", proto.Mode, proto.Format, proto.Reason)}}); err != nil {
			return r.fail("store", err)
		}
	}

	warnedPrice := false
	for {
		if r.steps >= maxSteps {
			return r.stop(agent.StopMaxSteps, fmt.Sprintf("max_steps of %d reached", maxSteps))
		}
		if res, done, err := r.interrupted(ctx, loop); done {
			return res, err
		}
		step := r.steps + 1
		start := time.Now()
		resp, err := a.conn.Chat(loop, model.Request{
			Model:    a.model,
			System:   system,
			Messages: msgs,
			Tools:    apiTools,
			RecordID: t.RecordID,
			Trial:    t.Trial,
		})
		if err != nil {
			if res, done, ierr := r.interrupted(ctx, loop); done {
				return res, ierr
			}
			return r.fail("model", &modelError{fmt.Errorf("step %d: %w", step, err)})
		}
		r.steps = step
		callMS := since(start)

		usd, priced := a.cost([]string{resp.Model, a.model}, resp.Usage)
		if !priced {
			if budget.USD > 0 {
				return r.fail("config", fmt.Errorf("harness.builtin.budget.usd is set but no price is known for model %q: add it under harness.builtin.pricing", firstNonEmpty(resp.Model, a.model)))
			}
			if !warnedPrice {
				warnedPrice = true
				r.log.Warn("no price known for model; cost is not counted", "model", firstNonEmpty(resp.Model, a.model))
			}
		}
		r.res.Usage = r.res.Usage.Add(resp.Usage)
		r.res.CostUSD += usd
		if err := r.emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: step, DurationMS: callMS,
			ModelCall: &trajectory.ModelCall{Model: firstNonEmpty(resp.Model, a.model), Usage: resp.Usage,
				CostUSD: usd, StopReason: resp.StopReason, Role: "agent",
				Provider: resp.Provider, RequestModel: a.model, ResponseModel: resp.Model, ResponseID: resp.ID}}); err != nil {
			return r.fail("store", err)
		}

		msg := resp.Message
		msg.Role = trajectory.RoleAssistant
		problems, err := r.textCalls(proto, &msg)
		if err != nil {
			return r.fail("config", err)
		}
		for i := range msg.ToolCalls {
			if msg.ToolCalls[i].ID == "" {
				// Tool results must name the call they answer.
				msg.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", step, i)
			}
		}
		if proto.Mode == toolcall.ModePrompted {
			// The endpoint has no tool calls: it gets back the text the
			// model wrote, and the results as a user message below.
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleAssistant, Content: msg.Content})
		} else {
			msgs = append(msgs, msg)
		}
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: step, Message: &msg}); err != nil {
			return r.fail("store", err)
		}
		for _, p := range problems {
			if err := r.emit(trajectory.Event{Kind: trajectory.KindLog, Step: step, Log: &trajectory.Log{Text: "unreadable tool call, not run: " + p}}); err != nil {
				return r.fail("store", err)
			}
		}
		if msg.Content != "" {
			r.res.Output = msg.Content
		}
		r.log.Debug("model call", "step", step, "tool_calls", len(msg.ToolCalls), "problems", len(problems), "usage", resp.Usage.Total(), "ms", callMS)
		if len(msg.ToolCalls) == 0 && len(problems) == 0 {
			user, detail, err := r.userTurn(loop, msg)
			if err != nil {
				if res, done, ierr := r.interrupted(ctx, loop); done {
					return res, ierr
				}
				return r.fail("user_simulator", fmt.Errorf("step %d: %w", step, err))
			}
			if user == nil {
				return r.stop(agent.StopAnswered, detail)
			}
			msgs = append(msgs, *user)
			continue
		}

		tr := &toolRun{task: &t, step: step, emit: r.emit, trialTools: trialTools}
		var results []trajectory.ToolResult
		for _, tc := range msg.ToolCalls {
			if err := r.emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: step, ToolCall: &tc}); err != nil {
				return r.fail("store", err)
			}
			start := time.Now()
			out, err := tr.call(loop, tc)
			if err != nil {
				if res, done, ierr := r.interrupted(ctx, loop); done {
					return res, ierr
				}
				return r.fail("sandbox", fmt.Errorf("step %d, tool %s: %w", step, tc.Name, err))
			}
			if err := r.emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: step, DurationMS: since(start),
				ToolResult: &out}); err != nil {
				return r.fail("store", err)
			}
			results = append(results, out)
		}
		switch {
		case proto.Mode == toolcall.ModePrompted || len(msg.ToolCalls) == 0:
			// Prompted mode, or native mode with only unreadable calls
			// (which have no call id to answer).
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleUser, Content: toolcall.ResultsMessage(results, problems)})
		default:
			for _, out := range results {
				msgs = append(msgs, trajectory.Message{Role: trajectory.RoleTool, Content: out.Output,
					ToolCallID: out.CallID, Name: out.Name})
			}
			if len(problems) > 0 {
				msgs = append(msgs, trajectory.Message{Role: trajectory.RoleUser, Content: toolcall.ResultsMessage(nil, problems)})
			}
		}

		if budget.Tokens > 0 && r.res.Usage.Total() >= budget.Tokens {
			return r.stop(agent.StopBudgetTokens, fmt.Sprintf("%d tokens used of budget.tokens %d", r.res.Usage.Total(), budget.Tokens))
		}
		if budget.USD > 0 && r.res.CostUSD >= budget.USD {
			return r.stop(agent.StopBudgetUSD, fmt.Sprintf("$%.6f spent of budget.usd $%.6f", r.res.CostUSD, budget.USD))
		}
	}
}

// textCalls finds the tool calls of the protocol in the reply's text and
// sets them on msg; it returns the calls that could not be read. In
// prompted mode the text is all there is (structured calls are ignored:
// only the declared protocol is intercepted); in native mode the text is
// read only when the reply has no structured call.
func (r *run) textCalls(proto toolcall.Protocol, msg *trajectory.Message) ([]string, error) {
	switch proto.Mode {
	case toolcall.ModePrompted:
		if n := len(msg.ToolCalls); n > 0 {
			r.log.Warn("ignoring structured tool calls in prompted mode", "calls", n)
		}
		p, err := toolcall.Parse(proto.Format, msg.Content)
		if err != nil {
			return nil, err
		}
		msg.ToolCalls = p.Calls
		return p.Problems, nil
	default:
		if len(msg.ToolCalls) > 0 || msg.Content == "" {
			return nil, nil
		}
		p := toolcall.ParseNativeJSON(msg.Content)
		msg.ToolCalls = p.Calls
		return p.Problems, nil
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

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
package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"evals.si/agent"
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
	system := systemPrompt(t.Workdir, recordSystem, a.cfg.Instructions)
	opening := append([]trajectory.Message{{Role: trajectory.RoleSystem, Content: system}}, msgs...)
	for i := range opening {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &opening[i]}); err != nil {
			return r.fail("store", err)
		}
	}

	tools := toolDefs()
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
			Tools:    tools,
			RecordID: t.RecordID,
			Trial:    t.Trial,
		})
		if err != nil {
			if res, done, ierr := r.interrupted(ctx, loop); done {
				return res, ierr
			}
			return r.fail("model", fmt.Errorf("model call %d: %w", step, err))
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
				CostUSD: usd, StopReason: resp.StopReason, Role: "agent"}}); err != nil {
			return r.fail("store", err)
		}

		msg := resp.Message
		msg.Role = trajectory.RoleAssistant
		for i := range msg.ToolCalls {
			if msg.ToolCalls[i].ID == "" {
				// Tool results must name the call they answer.
				msg.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", step, i)
			}
		}
		msgs = append(msgs, msg)
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: step, Message: &msg}); err != nil {
			return r.fail("store", err)
		}
		if msg.Content != "" {
			r.res.Output = msg.Content
		}
		r.log.Debug("model call", "step", step, "tool_calls", len(msg.ToolCalls), "usage", resp.Usage.Total(), "ms", callMS)
		if len(msg.ToolCalls) == 0 {
			return r.stop(agent.StopAnswered, "")
		}

		tr := &toolRun{task: &t, step: step, emit: r.emit}
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
			msgs = append(msgs, trajectory.Message{Role: trajectory.RoleTool, Content: out.Output,
				ToolCallID: tc.ID, Name: tc.Name})
		}

		if budget.Tokens > 0 && r.res.Usage.Total() >= budget.Tokens {
			return r.stop(agent.StopBudgetTokens, fmt.Sprintf("%d tokens used of budget.tokens %d", r.res.Usage.Total(), budget.Tokens))
		}
		if budget.USD > 0 && r.res.CostUSD >= budget.USD {
			return r.stop(agent.StopBudgetUSD, fmt.Sprintf("$%.6f spent of budget.usd $%.6f", r.res.CostUSD, budget.USD))
		}
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

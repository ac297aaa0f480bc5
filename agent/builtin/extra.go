package builtin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"evals.si/agent/tools"
	"evals.si/model"
	"evals.si/trajectory"
)

// extra is what harness.builtin.tools adds to the agent: tools beyond its
// own (MCP servers, mocks) and fault injection. It is set before the first
// Run and only read afterwards.
type extra struct {
	providers []tools.Provider
	set       *tools.Set
	faults    *tools.Faults
}

// AddTools gives the agent the tools of providers (MCP servers, mocks)
// besides its own; each trial opens its own session of every provider and
// closes it when the trial ends. A tool whose name clashes with another
// tool is an error. Call it before the first Run: it is not safe
// concurrently with Runs.
func (a *Agent) AddTools(providers ...tools.Provider) error {
	all := append(slices.Clone(a.extra.providers), providers...)
	set, err := tools.NewSet(ownToolNames(), "built-in agent's own", all...)
	if err != nil {
		return err
	}
	a.extra.providers, a.extra.set = all, set
	return nil
}

// SetFaults injects faults into the agent's tool calls (see tools.Faults).
// A rule naming a tool the agent does not have is an error, so call it
// after AddTools, and before the first Run.
func (a *Agent) SetFaults(f *tools.Faults) error {
	if err := f.Check(a.toolNames()); err != nil {
		return err
	}
	a.extra.faults = f
	return nil
}

// Tools lists every tool the agent offers: its own, then the added ones.
func (a *Agent) Tools() []model.Tool {
	return append(toolDefs(), a.extra.set.Tools()...)
}

func ownToolNames() []string {
	var names []string
	for _, t := range toolDefs() {
		names = append(names, t.Name)
	}
	return names
}

func (a *Agent) allTools() []model.Tool { return a.Tools() }

func (a *Agent) toolNames() []string {
	var names []string
	for _, t := range a.Tools() {
		names = append(names, t.Name)
	}
	return names
}

// trialTools is one trial's view of the added tools: open sessions, the
// fault rules, and every tool name (for messages and fault matching).
type trialTools struct {
	sessions *tools.Sessions
	faults   *tools.Faults
	names    []string
}

// openTools opens the trial's sessions of the added tools (an MCP stdio
// server starts here); the caller closes them when the trial ends.
func (a *Agent) openTools(ctx context.Context) (*trialTools, error) {
	ss, err := a.extra.set.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &trialTools{sessions: ss, faults: a.extra.faults, names: a.toolNames()}, nil
}

// closeTools ends a trial's tool sessions, logging (not failing on)
// errors: the trial's outcome is already decided.
func (r *run) closeTools(tt *trialTools) {
	if err := tt.sessions.Close(); err != nil {
		r.log.Warn("closing tool sessions", "err", err)
	}
}

// call runs one tool call of the step under the fault rules: an error or
// timeout fault replaces the call (the tool does not run), a malformed
// fault corrupts the result the tool really returned. Calls of tools that
// do not exist are never faulted.
func (r *toolRun) call(ctx context.Context, tc trajectory.ToolCall) (trajectory.ToolResult, error) {
	index := r.n
	r.n++
	kind := ""
	if tt := r.trialTools; tt != nil && tt.faults != nil && slices.Contains(tt.names, tc.Name) {
		kind = tt.faults.Decide(r.task.RecordID, r.task.Trial, r.step, index, tc.Name)
	}
	switch kind {
	case tools.FaultError, tools.FaultTimeout:
		return tools.Injected(kind, tc), nil
	}
	res, err := r.dispatch(ctx, tc)
	if err != nil || kind != tools.FaultMalformed {
		return res, err
	}
	return tools.Malform(res), nil
}

// callExtra runs a call the agent's own tools do not know: an added tool,
// or an error result naming the tools there are.
func (r *toolRun) callExtra(ctx context.Context, tc trajectory.ToolCall) (trajectory.ToolResult, error) {
	names := ownToolNames()
	if tt := r.trialTools; tt != nil {
		res, ok, err := tt.sessions.Call(ctx, tc)
		if ok {
			if err != nil {
				return res, fmt.Errorf("calling tool %s: %w", tc.Name, err)
			}
			return res, nil
		}
		names = tt.names
	}
	return trajectory.ToolResult{CallID: tc.ID, Name: tc.Name, IsError: true,
		Output: fmt.Sprintf("unknown tool %q; the tools are %s", tc.Name, strings.Join(names, ", "))}, nil
}

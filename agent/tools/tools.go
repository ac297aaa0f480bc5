// Package tools holds the extra tools the built-in agent can be given
// besides its own (harness.builtin.tools): MCP servers (subpackage
// mcptools), canned mock tools, and deterministic fault injection.
//
// Tools come from Providers. A Provider knows its tool list from the start
// of a run (so the model's tool list and name clashes are settled before
// any trial) and opens a Session per trial, so trials never share a
// server's state: an MCP stdio server is a process per trial, a streamable
// HTTP server a session per trial.
package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"evals.si/model"
	"evals.si/trajectory"
)

// Provider supplies tools to every trial of a run.
type Provider interface {
	// Source says where the tools come from in the spec, for messages,
	// e.g. harness.builtin.tools.mcp[0] (server "everything").
	Source() string
	// Tools lists the tools as the model sees them.
	Tools() []model.Tool
	// Open starts one trial's session; the caller closes it when the trial
	// ends.
	Open(ctx context.Context) (Session, error)
}

// Session is one trial's use of a Provider.
type Session interface {
	// Call runs a tool named as in the Provider's Tools. A call the model
	// got wrong, or a tool that reports failure, is a result with IsError
	// set; the error return is for infrastructure failures (the server went
	// away), which end the trial.
	Call(ctx context.Context, call trajectory.ToolCall) (trajectory.ToolResult, error)
	Close() error
}

// Set is the tools of several Providers, with unique names.
type Set struct {
	providers []Provider
	owner     map[string]int // tool name → index in providers
	tools     []model.Tool
}

// NewSet checks that no two tools share a name, neither among the
// providers nor with reserved (the agent's own tools, described by
// reservedBy), and returns the set.
func NewSet(reserved []string, reservedBy string, providers ...Provider) (*Set, error) {
	s := &Set{providers: providers, owner: map[string]int{}}
	for i, p := range providers {
		for _, t := range p.Tools() {
			if t.Name == "" {
				return nil, fmt.Errorf("%s has a tool without a name", p.Source())
			}
			if slices.Contains(reserved, t.Name) {
				return nil, fmt.Errorf("tool %q of %s clashes with the %s tool of the same name; rename it (an MCP server's tools are exposed as <name>__<tool> when the server has a name)", t.Name, p.Source(), reservedBy)
			}
			if j, dup := s.owner[t.Name]; dup {
				return nil, fmt.Errorf("tool %q of %s clashes with a tool of the same name of %s; rename one (an MCP server's tools are exposed as <name>__<tool> when the server has a name)", t.Name, p.Source(), providers[j].Source())
			}
			s.owner[t.Name] = i
			s.tools = append(s.tools, t)
		}
	}
	return s, nil
}

// Tools lists every tool of the set, in provider order.
func (s *Set) Tools() []model.Tool {
	if s == nil {
		return nil
	}
	return s.tools
}

// Has reports whether the set has a tool of that name.
func (s *Set) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.owner[name]
	return ok
}

// Open starts a session of every provider for one trial. On error, the
// sessions already open are closed.
func (s *Set) Open(ctx context.Context) (*Sessions, error) {
	ss := &Sessions{set: s}
	if s == nil {
		return ss, nil
	}
	for _, p := range s.providers {
		sess, err := p.Open(ctx)
		if err != nil {
			ss.Close()
			return nil, fmt.Errorf("opening the tools of %s: %w", p.Source(), err)
		}
		ss.open = append(ss.open, sess)
	}
	return ss, nil
}

// Sessions is one trial's open sessions of a Set.
type Sessions struct {
	set  *Set
	open []Session
}

// Call routes a call to the provider owning its tool. ok is false when no
// provider has the tool.
func (ss *Sessions) Call(ctx context.Context, call trajectory.ToolCall) (res trajectory.ToolResult, ok bool, err error) {
	if ss == nil || ss.set == nil {
		return res, false, nil
	}
	i, ok := ss.set.owner[call.Name]
	if !ok {
		return res, false, nil
	}
	res, err = ss.open[i].Call(ctx, call)
	res.CallID, res.Name = call.ID, call.Name
	return res, true, err
}

// Close closes every session, returning the errors joined.
func (ss *Sessions) Close() error {
	if ss == nil {
		return nil
	}
	var errs []string
	for _, s := range ss.open {
		if err := s.Close(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	ss.open = nil
	if len(errs) > 0 {
		return fmt.Errorf("closing tool sessions: %s", strings.Join(errs, "; "))
	}
	return nil
}

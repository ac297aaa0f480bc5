package tau2

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/pyjson"
)

// Requestors: who made a tool call.
const (
	Assistant = "assistant"
	User      = "user"
)

// ToolCall is one tool call of the agent or (dual control) the user.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Requestor string          `json:"requestor"`
}

// Message is one message of a conversation as tau2 grades it: an
// assistant or user message (text, or tool calls), or a tool message
// answering one call.
type Message struct {
	Role      string     `json:"role"` // "assistant", "user" or "tool"
	Content   string     `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Tool messages: the call's id, who asked, and whether it failed.
	ID        string `json:"id,omitempty"`
	Requestor string `json:"requestor,omitempty"`
	Error     bool   `json:"error,omitempty"`
}

// World is one live tau2 Environment over a domain's fresh databases.
type World struct {
	env domain.Env
}

// NewWorld returns a fresh environment of d.
func NewWorld(d domain.Data) (*World, error) {
	env, err := d.NewEnv()
	if err != nil {
		return nil, fmt.Errorf("making the environment: %w", err)
	}
	w := &World{env: env}
	// Environment.__init__ syncs the tools.
	if err := env.Sync(); err != nil {
		return nil, fmt.Errorf("making the environment: %w", err)
	}
	return w, nil
}

// Env is the environment's toolkits.
func (w *World) Env() domain.Env { return w.env }

func (w *World) toolkit(side string) (domain.Toolkit, error) {
	switch side {
	case User:
		if w.env.User() == nil {
			return nil, errors.New("User tools not available")
		}
		return w.env.User(), nil
	case Assistant:
		return w.env.Agent(), nil
	}
	return nil, fmt.Errorf("Invalid requestor: %s", side)
}

// HasTool reports whether either side has a tool called name.
func (w *World) HasTool(name string) (domain.Func, bool) {
	if f, ok := domain.HasTool(w.env.Agent(), name); ok {
		return f, true
	}
	if u := w.env.User(); u != nil {
		return domain.HasTool(u, name)
	}
	return domain.Func{}, false
}

func args(raw json.RawMessage) (domain.Args, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return domain.Args{}, nil
	}
	var a domain.Args
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("the arguments are not a JSON object: %s", raw)
	}
	return a, nil
}

// Respond is Environment.get_response: the call is made on its
// requestor's toolkit and the tools synced; a failure is the tool
// message "Error: <what was raised>".
func (w *World) Respond(tc ToolCall) Message {
	msg := Message{Role: "tool", ID: tc.ID, Requestor: tc.Requestor}
	if msg.Requestor == "" {
		msg.Requestor = Assistant
	}
	res, err := w.makeToolCall(tc)
	if err == nil {
		err = w.env.Sync()
	}
	if err != nil {
		msg.Content, msg.Error = "Error: "+err.Error(), true
		return msg
	}
	s, err := pyjson.ToolResult(res)
	if err != nil {
		msg.Content, msg.Error = "Error: "+err.Error(), true
		return msg
	}
	msg.Content = s
	return msg
}

func (w *World) makeToolCall(tc ToolCall) (any, error) {
	side := tc.Requestor
	if side == "" {
		side = Assistant
	}
	tk, err := w.toolkit(side)
	if err != nil {
		return nil, err
	}
	a, err := args(tc.Arguments)
	if err != nil {
		return nil, err
	}
	return domain.CallTool(tk, tc.Name, a)
}

// RunEnvFunction is run_env_function_call: any function of one side's
// toolkit, then the tools synced.
func (w *World) RunEnvFunction(c EnvFunctionCall) (any, error) {
	tk, err := w.toolkit(c.EnvType)
	if err != nil {
		return nil, err
	}
	a, err := args(c.Arguments)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.FuncName, err)
	}
	res, err := domain.CallFunc(tk, c.FuncName, a)
	if err != nil {
		return nil, err
	}
	if err := w.env.Sync(); err != nil {
		return nil, err
	}
	return res, nil
}

// Assert is run_env_assertion without raising: whether the function's
// result is the assertion's value. A function that fails or does not
// return a bool is an error.
func (w *World) Assert(a EnvAssertion) (bool, error) {
	res, err := w.RunEnvFunction(a.EnvFunctionCall)
	if err != nil {
		return false, fmt.Errorf("assertion %s: %w", a.FuncName, err)
	}
	b, ok := res.(bool)
	if !ok {
		return false, fmt.Errorf("Function %s returned %T instead of bool", a.FuncName, res)
	}
	return b == a.Want(), nil
}

// Hashes are get_db_hash and get_user_db_hash ("" for a side without a
// database).
func (w *World) Hashes() (agent, user string, err error) {
	if agent, err = pyjson.Hash(w.env.Agent().DB()); err != nil {
		return "", "", fmt.Errorf("hashing the agent database: %w", err)
	}
	if u := w.env.User(); u != nil {
		if user, err = pyjson.Hash(u.DB()); err != nil {
			return "", "", fmt.Errorf("hashing the user database: %w", err)
		}
	}
	return agent, user, nil
}

// SetState is Environment.set_state: the databases updated with the
// initialization data, the initialization actions run, then the
// mutating tool calls of history replayed, each of whose results must be
// what the history recorded (strict replay).
func (w *World) SetState(init *InitialState, history []Message) error {
	if init != nil && init.InitializationData != nil {
		d := init.InitializationData
		if len(d.AgentData) > 0 && string(d.AgentData) != "null" {
			if err := w.env.Agent().UpdateDB(d.AgentData); err != nil {
				return fmt.Errorf("initialization_data.agent_data: %w", err)
			}
		}
		if len(d.UserData) > 0 && string(d.UserData) != "null" {
			if w.env.User() == nil {
				return errors.New("initialization_data.user_data: the domain has no user database")
			}
			if err := w.env.User().UpdateDB(d.UserData); err != nil {
				return fmt.Errorf("initialization_data.user_data: %w", err)
			}
		}
	}
	if init != nil {
		for i, a := range init.InitializationActions {
			if _, err := w.RunEnvFunction(a); err != nil {
				return fmt.Errorf("initialization_actions[%d] %s: %w", i, a.FuncName, err)
			}
		}
	}
	pairs, err := toolPairs(history)
	if err != nil {
		return err
	}
	for _, p := range pairs {
		f, ok := w.HasTool(p.call.Name)
		if !ok || !f.Mutates {
			continue // unknown tools are no-ops; reads are not replayed
		}
		got := w.Respond(p.call)
		if !jsonEqual(got.Content, p.result.Content) {
			return fmt.Errorf("replaying %s (%s): it returned %q, the trajectory recorded %q", p.call.Name, p.call.ID, got.Content, p.result.Content)
		}
	}
	return w.env.Sync()
}

type pair struct {
	call   ToolCall
	result Message
}

// toolPairs pairs each tool call with the tool message that follows it,
// as set_state's get_actions_from_messages does.
func toolPairs(history []Message) ([]pair, error) {
	var out []pair
	for i := 0; i < len(history); i++ {
		m := history[i]
		if m.Role == "tool" {
			return nil, errors.New("Tool message not expected. Tool messages should always follow a tool call.")
		}
		if (m.Role != "assistant" && m.Role != "user") || len(m.ToolCalls) == 0 {
			continue
		}
		for _, tc := range m.ToolCalls {
			i++
			if i >= len(history) {
				return nil, errors.New("Tool message expected. Got None.")
			}
			tm := history[i]
			if tm.Role != "tool" {
				return nil, fmt.Errorf("Tool message expected. Got %s message.", tm.Role)
			}
			if tm.ID != tc.ID {
				return nil, fmt.Errorf("Tool call id mismatch. Got %s and %s", tc.ID, tm.ID)
			}
			out = append(out, pair{tc, tm})
		}
	}
	return out, nil
}

// jsonEqual compares two tool results as set_state does: as JSON values
// when they decode, else as text.
func jsonEqual(a, b string) bool {
	var x, y any
	ex, ey := json.Unmarshal([]byte(a), &x), json.Unmarshal([]byte(b), &y)
	if ex != nil || ey != nil {
		if ex != nil && ey != nil {
			return a == b
		}
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Package trajectory defines the typed, append-only events that record what
// happened in a trial. Evaluators, the viewer, OTel export and replay all read
// events; none of them reaches back into the agent.
package trajectory

import (
	"encoding/json"
	"time"
)

// Kind says which payload an event carries.
type Kind string

const (
	KindMessage    Kind = "message"     // a chat message (user, assistant, system)
	KindModelCall  Kind = "model_call"  // one model call: usage, latency, cost
	KindToolCall   Kind = "tool_call"   // the agent asked for a tool
	KindToolResult Kind = "tool_result" // the tool's result
	KindPolicy     Kind = "policy"      // a sandbox policy event (refused host, denial)
	KindEscalation Kind = "escalation"  // request_escalation, granted or denied
	KindChecker    Kind = "checker"     // the checker's run and verdict
	KindStop       Kind = "stop"        // why the agent loop ended
	KindLog        Kind = "log"         // a note from the harness (setup, diff, faults)
	KindError      Kind = "error"       // an error inside the trial
	KindDivergence Kind = "divergence"  // replay: a tool result differs from the recording
)

// Event is one step of a trajectory. Exactly the payload named by Kind is set.
type Event struct {
	Seq  int       `json:"seq"`
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Step is the agent step (model call number, from 1) the event belongs to.
	Step int `json:"step,omitempty"`
	// DurationMS is how long the step took, for timed events.
	DurationMS int64 `json:"duration_ms,omitempty"`

	Message    *Message    `json:"message,omitempty"`
	ModelCall  *ModelCall  `json:"model_call,omitempty"`
	ToolCall   *ToolCall   `json:"tool_call,omitempty"`
	ToolResult *ToolResult `json:"tool_result,omitempty"`
	Policy     *Policy     `json:"policy,omitempty"`
	Escalation *Escalation `json:"escalation,omitempty"`
	Checker    *Checker    `json:"checker,omitempty"`
	Stop       *Stop       `json:"stop,omitempty"`
	Log        *Log        `json:"log,omitempty"`
	Error      *Error      `json:"error,omitempty"`
	Divergence *Divergence `json:"divergence,omitempty"`
}

// Role of a chat message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is a chat message; connectors translate it to each wire format.
type Message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool-role message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on tool-role messages.
	Name string `json:"name,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Usage counts tokens of one or more model calls.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.InputTokens + u.OutputTokens }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{InputTokens: u.InputTokens + o.InputTokens, OutputTokens: u.OutputTokens + o.OutputTokens}
}

// ModelCall records one model call.
type ModelCall struct {
	Model      string  `json:"model,omitempty"`
	Usage      Usage   `json:"usage"`
	CostUSD    float64 `json:"cost_usd,omitempty"`
	StopReason string  `json:"stop_reason,omitempty"`
	// Role says whose call it was: agent (default), judge, user_simulator.
	Role string `json:"role,omitempty"`
	// Provider is the connector that answered (openai, anthropic,
	// scripted), when the call went through one.
	Provider string `json:"provider,omitempty"`
	// RequestModel is the model asked for, when it is known apart from
	// Model; ResponseModel and ResponseID are what the reply named.
	RequestModel  string `json:"request_model,omitempty"`
	ResponseModel string `json:"response_model,omitempty"`
	ResponseID    string `json:"response_id,omitempty"`
}

// ToolResult is what a tool returned.
type ToolResult struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	Output string `json:"output"`
	// IsError marks a result that reports a failure to the model.
	IsError  bool `json:"is_error,omitempty"`
	ExitCode *int `json:"exit_code,omitempty"`
	// Truncated is set when Output was cut at the output cap.
	Truncated bool `json:"truncated,omitempty"`
	// Fault names an injected fault (error, timeout, malformed).
	Fault string `json:"fault,omitempty"`
	// Divergence is set in replay when the result differs from the recording.
	Divergence string `json:"divergence,omitempty"`
	// Type is the tool's kind in OTel's terms (gen_ai.tool.type): function
	// (run by the harness: the default), extension (an MCP server's tool,
	// one that calls out of the harness), datastore (retrieval).
	Type string `json:"type,omitempty"`
}

// Policy is a sandbox policy event: something the sandbox refused or stopped.
type Policy struct {
	// Kind: network (refused host), oom, timeout, pids, fsize, ...
	Kind   string `json:"kind"`
	Detail string `json:"detail,omitempty"`
	Host   string `json:"host,omitempty"`
}

// Escalation records a request_escalation call.
type Escalation struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason,omitempty"`
	Granted bool   `json:"granted"`
}

// Checker records the checker's run.
type Checker struct {
	Command  []string `json:"command,omitempty"`
	ExitCode int      `json:"exit_code"`
	Output   string   `json:"output,omitempty"`
	Pass     bool     `json:"pass"`
	Score    float64  `json:"score"`
	Details  string   `json:"details,omitempty"`
}

// Stop says why the agent loop ended.
type Stop struct {
	// Reason: answered, max_steps, budget_usd, budget_tokens, wall_clock,
	// error, canceled.
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Log is a free-form harness note.
type Log struct {
	Text string `json:"text"`
}

// Error is an error inside the trial.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Divergence is a replayed tool result that differs from the recorded one.
type Divergence struct {
	Tool   string `json:"tool"`
	CallID string `json:"call_id,omitempty"`
	// Summary says what differs, e.g. "exit code 1, recorded 0".
	Summary  string `json:"summary"`
	Recorded string `json:"recorded,omitempty"`
	Replayed string `json:"replayed,omitempty"`
}

// Sink receives events as they happen; the store appends them durably.
type Sink interface {
	Emit(e Event) error
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(Event) error

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) error { return f(e) }

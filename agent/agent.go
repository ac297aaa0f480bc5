// Package agent defines what every agent kind implements: run one task in a
// sandbox and report what happened as trajectory events. The built-in
// tool-calling agent lives in agent/builtin; agents of other kinds (a2a, mcp,
// responses, http, cli) live in their own sub-packages.
package agent

import (
	"context"
	"io/fs"
	"time"

	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Sandbox is the part of sandbox.Sandbox an agent works through. The engine
// owns the sandbox's lifecycle (creation, Close); an agent only uses it.
type Sandbox interface {
	Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
}

// Task is one trial of one record.
type Task struct {
	RecordID string
	Trial    int
	// Instruction is the record's input as one instruction.
	Instruction string
	// Input holds the record's input messages when the record has messages;
	// an agent that can take a conversation uses them instead of Instruction.
	Input []trajectory.Message
	// Metadata is the record's metadata. It may hold the task's reference
	// solution: only the oracle agent, which applies it, and an external
	// harness (trusted code on the worker, which may need the entry it runs,
	// as BFCL's does) read it, and no agent passes it to a model.
	Metadata map[string]spec.JSON
	Sandbox  Sandbox
	// Harness is the same sandbox as the task's harness uses it, as root
	// whatever user the agent runs as: for files the harness places, not
	// the agent (an oracle's reference solution, which Harbor uploads as
	// root before running it as the agent's user). An agent's own
	// commands and files go through Sandbox.
	Harness Sandbox
	// Workdir is the task's working directory inside the sandbox.
	Workdir string
	// CommandTimeout bounds one command the agent runs (0: the sandbox's
	// default).
	CommandTimeout time.Duration
	// OutputLimit caps each of stdout and stderr of one command the agent
	// runs, in bytes (the run's caps.command_output_kb; 0: the sandbox's
	// default). Commands that set no limit of their own get it anyway.
	OutputLimit int
	// Emit receives the trajectory's events as they happen.
	Emit trajectory.Sink
	// Escalate asks the harness for a wider policy (kind is e.g. "network").
	// The harness decides, widens the sandbox's policy when it grants, and
	// returns whether it did; an error means it could not decide or apply
	// it. A nil Escalate denies every request.
	Escalate func(ctx context.Context, kind, reason string) (granted bool, err error)
	// User, when set, continues the conversation after each of the agent's
	// answers until it is done (user_simulator); nil means one turn.
	User User
}

// Result is how an agent's run ended.
type Result struct {
	// Output is the agent's final answer.
	Output string
	Usage  trajectory.Usage
	// CostUSD is the model spend, from the pricing table; 0 when unknown.
	CostUSD float64
	// Steps counts model calls.
	Steps int
	// StopReason is one of the Stop* constants.
	StopReason string
	// Verdict is the agent's own verdict on the task (an external harness's
	// Check); the engine uses it only when the environment has no checker.
	Verdict *trajectory.Checker
}

// Stop reasons, as recorded in trajectory.Stop.Reason and Result.StopReason.
const (
	StopAnswered     = "answered"      // the model answered without a tool call
	StopMaxSteps     = "max_steps"     // max_steps model calls were made
	StopBudgetUSD    = "budget_usd"    // spend reached budget.usd
	StopBudgetTokens = "budget_tokens" // tokens reached budget.tokens
	StopWallClock    = "wall_clock"    // budget.wall_clock elapsed
	StopError        = "error"         // an infrastructure error ended the run
	StopCanceled     = "canceled"      // the caller canceled the run
)

// Agent runs a task. A returned error means the agent could not run (an
// infrastructure failure: the model provider, the sandbox, the event store),
// never that the task failed: the checker decides that.
type Agent interface {
	Run(ctx context.Context, t Task) (Result, error)
}

// User is the other side of a multi-turn conversation: the user simulator.
// An agent that has finished a turn asks it for the next user message.
type User interface {
	// Reply reads the conversation so far (the agent's last answer is its
	// last message) and returns the user's next message, or done when the
	// user is finished (text is then empty or a closing remark).
	Reply(ctx context.Context, conversation []trajectory.Message) (text string, done bool, err error)
}

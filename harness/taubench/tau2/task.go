// Package tau2 is tau2-bench's task model, environment semantics and
// grading (evaluate_simulation), over the domains of harness/taubench: the
// rules the τ-bench harness runs a conversation by and grades it with,
// kept in one place.
package tau2

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Task is a tau2 task (tau2/data_model/tasks.py), with the fields grading
// and the user simulator read.
type Task struct {
	ID                 string              `json:"id"`
	Description        json.RawMessage     `json:"description,omitempty"`
	UserScenario       UserScenario        `json:"user_scenario"`
	Ticket             *string             `json:"ticket,omitempty"`
	InitialState       *InitialState       `json:"initial_state,omitempty"`
	EvaluationCriteria *EvaluationCriteria `json:"evaluation_criteria,omitempty"`
	// UserTools limits the user's tools to these names (all when unset).
	UserTools *[]string `json:"user_tools,omitempty"`
}

// UserScenario is what the user simulator is told.
type UserScenario struct {
	Persona      *string      `json:"persona,omitempty"`
	Instructions Instructions `json:"instructions"`
}

// Instructions are a task's user instructions: a plain text, or tau2's
// StructuredUserInstructions.
type Instructions struct {
	Text           string
	Structured     bool
	Domain         string
	ReasonForCall  string
	KnownInfo      *string
	UnknownInfo    *string
	TaskInstructor string
}

type structuredInstructions struct {
	Domain           string  `json:"domain"`
	ReasonForCall    string  `json:"reason_for_call"`
	KnownInfo        *string `json:"known_info"`
	UnknownInfo      *string `json:"unknown_info"`
	TaskInstructions string  `json:"task_instructions"`
}

// UnmarshalJSON reads either form.
func (in *Instructions) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*in = Instructions{Text: s}
		return nil
	}
	var st structuredInstructions
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("user_scenario.instructions: want a string or {domain, reason_for_call, known_info, unknown_info, task_instructions}: %w", err)
	}
	*in = Instructions{Structured: true, Domain: st.Domain, ReasonForCall: st.ReasonForCall,
		KnownInfo: st.KnownInfo, UnknownInfo: st.UnknownInfo, TaskInstructor: st.TaskInstructions}
	return nil
}

// MarshalJSON writes the form it was read in.
func (in Instructions) MarshalJSON() ([]byte, error) {
	if !in.Structured {
		return json.Marshal(in.Text)
	}
	return json.Marshal(structuredInstructions{Domain: in.Domain, ReasonForCall: in.ReasonForCall,
		KnownInfo: in.KnownInfo, UnknownInfo: in.UnknownInfo, TaskInstructions: in.TaskInstructor})
}

// String is str(UserInstructions), as tau2 puts it in the user's prompt.
func (in Instructions) String() string {
	if !in.Structured {
		return in.Text
	}
	var lines []string
	lines = append(lines, "Domain: "+in.Domain)
	lines = append(lines, "Reason for call:\n"+indent(in.ReasonForCall, "\t"))
	if in.KnownInfo != nil {
		lines = append(lines, "Known info:\n"+indent(*in.KnownInfo, "\t"))
	}
	if in.UnknownInfo != nil {
		lines = append(lines, "Unknown info:\n"+indent(*in.UnknownInfo, "\t"))
	}
	lines = append(lines, "Task instructions:\n"+indent(in.TaskInstructor, "\t"))
	return strings.Join(lines, "\n")
}

// String is str(UserScenario).
func (u UserScenario) String() string {
	var lines []string
	if u.Persona != nil {
		lines = append(lines, "Persona:", indent(*u.Persona, "\t"))
	}
	lines = append(lines, "Instructions:", indent(u.Instructions.String(), "\t"))
	return strings.Join(lines, "\n")
}

// indent is Python's textwrap.indent: prefix on every line that is not
// only whitespace.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(l)
	}
	return b.String()
}

// InitialState is how a task's environment starts.
type InitialState struct {
	InitializationData    *InitializationData `json:"initialization_data,omitempty"`
	InitializationActions []EnvFunctionCall   `json:"initialization_actions,omitempty"`
	MessageHistory        []json.RawMessage   `json:"message_history,omitempty"`
}

// InitializationData updates the databases before anything runs.
type InitializationData struct {
	AgentData json.RawMessage `json:"agent_data,omitempty"`
	UserData  json.RawMessage `json:"user_data,omitempty"`
}

// EnvFunctionCall is a call of any toolkit function on one side.
type EnvFunctionCall struct {
	EnvType   string          `json:"env_type"`
	FuncName  string          `json:"func_name"`
	Arguments json.RawMessage `json:"arguments"`
}

// EnvAssertion is an EnvFunctionCall whose bool result must be
// AssertValue.
type EnvAssertion struct {
	EnvFunctionCall
	AssertValue *bool   `json:"assert_value,omitempty"`
	Message     *string `json:"message,omitempty"`
}

// Want is the value the assertion expects (default true).
func (a EnvAssertion) Want() bool { return a.AssertValue == nil || *a.AssertValue }

// Action is a gold tool call.
type Action struct {
	ActionID    string          `json:"action_id"`
	Requestor   string          `json:"requestor,omitempty"`
	Name        string          `json:"name"`
	Arguments   json.RawMessage `json:"arguments"`
	Info        *string         `json:"info,omitempty"`
	CompareArgs *[]string       `json:"compare_args,omitempty"`
}

// By is the action's requestor, "assistant" by default.
func (a Action) By() string {
	if a.Requestor == "" {
		return "assistant"
	}
	return a.Requestor
}

// Reward bases.
const (
	BasisDB           = "DB"
	BasisEnvAssertion = "ENV_ASSERTION"
	BasisNLAssertion  = "NL_ASSERTION"
	BasisAction       = "ACTION"
	BasisCommunicate  = "COMMUNICATE"
)

// EvaluationCriteria are what a task is graded on.
type EvaluationCriteria struct {
	Actions         *[]Action       `json:"actions,omitempty"`
	EnvAssertions   *[]EnvAssertion `json:"env_assertions,omitempty"`
	CommunicateInfo []string        `json:"communicate_info,omitempty"`
	NLAssertions    []string        `json:"nl_assertions,omitempty"`
	// RewardBasis is nil when the task does not say: tau2's default
	// [DB, COMMUNICATE].
	RewardBasis []string `json:"reward_basis,omitempty"`
}

// Basis is the reward basis, tau2's default filled in.
func (c *EvaluationCriteria) Basis() []string {
	if c.RewardBasis == nil {
		return []string{BasisDB, BasisCommunicate}
	}
	return c.RewardBasis
}

// Has reports whether the basis names b.
func (c *EvaluationCriteria) Has(b string) bool {
	for _, x := range c.Basis() {
		if x == b {
			return true
		}
	}
	return false
}

// NeedsJudge reports why a task cannot be graded without an LLM judging
// natural-language assertions ("" when it can): its basis has
// NL_ASSERTION and it has assertions to judge. With none, tau2's NL
// evaluator gives 1 without a judge, so the task is graded as tau2 does.
func (t *Task) NeedsJudge() string {
	c := t.EvaluationCriteria
	if c == nil || !c.Has(BasisNLAssertion) || len(c.NLAssertions) == 0 {
		return ""
	}
	return fmt.Sprintf("its reward basis includes NL_ASSERTION with %d natural-language assertions, which tau2 grades with an LLM judge", len(c.NLAssertions))
}

// Check returns what about the task cannot be graded by these rules.
func (t *Task) Check() error {
	if t.ID == "" {
		return fmt.Errorf("a task has no id")
	}
	c := t.EvaluationCriteria
	if c == nil {
		return nil
	}
	for _, b := range c.Basis() {
		switch b {
		case BasisDB, BasisEnvAssertion, BasisNLAssertion, BasisAction, BasisCommunicate:
		default:
			return fmt.Errorf("task %s: unknown reward basis %q (want DB, ENV_ASSERTION, NL_ASSERTION, ACTION or COMMUNICATE)", t.ID, b)
		}
	}
	return nil
}

// ParseTasks reads a tau2 tasks file: a JSON list of tasks, or {"tasks":
// [...]}.
func ParseTasks(data []byte) ([]Task, error) {
	var list []Task
	if err := json.Unmarshal(data, &list); err != nil {
		var wrapped struct {
			Tasks []Task `json:"tasks"`
		}
		if err2 := json.Unmarshal(data, &wrapped); err2 != nil || wrapped.Tasks == nil {
			return nil, fmt.Errorf("not a tau2 tasks file (a JSON list of tasks): %w", err)
		}
		list = wrapped.Tasks
	}
	seen := map[string]int{}
	for i := range list {
		if err := list[i].Check(); err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		if j, dup := seen[list[i].ID]; dup {
			return nil, fmt.Errorf("tasks %d and %d have the same id %q", j, i, list[i].ID)
		}
		seen[list[i].ID] = i
	}
	return list, nil
}

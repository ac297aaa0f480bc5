package tau2

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"evals.si/harness/taubench/domain"
)

// Termination reasons (tau2's TerminationReason): only a conversation
// the agent or the user ended is graded; any other ends with reward 0.
const (
	AgentStop     = "agent_stop"
	UserStop      = "user_stop"
	MaxSteps      = "max_steps"
	TooManyErrors = "too_many_errors"
	AgentError    = "agent_error"
	UserError     = "user_error"
)

// Reward is tau2's RewardInfo for one simulation.
type Reward struct {
	Reward      float64            `json:"reward"`
	RewardBasis []string           `json:"reward_basis"`
	Breakdown   map[string]float64 `json:"reward_breakdown,omitempty"`
	DBCheck     *DBCheck           `json:"db_check,omitempty"`
	EnvChecks   []EnvCheck         `json:"env_assertions,omitempty"`
	Actions     []ActionCheck      `json:"action_checks,omitempty"`
	Communicate []CommunicateCheck `json:"communicate_checks,omitempty"`
	Note        string             `json:"note,omitempty"`
}

// DBCheck is whether both databases match the gold environment's.
type DBCheck struct {
	Match  bool    `json:"db_match"`
	Reward float64 `json:"db_reward"`
}

// EnvCheck is one env_assertion on the predicted environment.
type EnvCheck struct {
	Assertion EnvAssertion `json:"env_assertion"`
	Met       bool         `json:"met"`
}

// ActionCheck is whether a gold action was matched by a tool call.
type ActionCheck struct {
	Action Action `json:"action"`
	Match  bool   `json:"action_match"`
}

// CommunicateCheck is whether the agent said one required piece of
// information.
type CommunicateCheck struct {
	Info string `json:"info"`
	Met  bool   `json:"met"`
}

// Evaluate is tau2's evaluate_simulation with EvaluationType ALL (what the
// official run uses) for a half-duplex conversation: the environment
// (databases after replaying the trajectory against those after replaying
// the gold actions, and the env assertions), the actions, and the
// communicated information, multiplied over the task's reward basis. An
// error is an infrastructure failure (the replay diverged, an assertion
// could not run), never a score.
func Evaluate(d domain.Data, task *Task, termination string, trajectory []Message) (*Reward, error) {
	if termination != AgentStop && termination != UserStop {
		return &Reward{Reward: 0, Note: "Simulation terminated prematurely. Termination reason: " + termination}, nil
	}
	c := task.EvaluationCriteria
	if c == nil {
		return &Reward{Reward: 1, Note: "No evaluation criteria"}, nil
	}
	if why := task.NeedsJudge(); why != "" {
		return nil, fmt.Errorf("task %s cannot be graded here: %s", task.ID, why)
	}
	env, err := evaluateEnv(d, task, trajectory)
	if err != nil {
		return nil, err
	}
	actions := evaluateActions(c, trajectory)
	comm := evaluateCommunicate(c, trajectory)

	r := &Reward{Reward: 1, RewardBasis: c.Basis(), Breakdown: map[string]float64{},
		DBCheck: env.DBCheck, EnvChecks: env.EnvChecks, Actions: actions.Actions, Communicate: comm.Communicate}
	if c.Has(BasisDB) || c.Has(BasisEnvAssertion) {
		for k, v := range env.Breakdown {
			r.Breakdown[k] = v
		}
		r.Reward *= env.Reward
	}
	if c.Has(BasisAction) {
		r.Breakdown[BasisAction] = actions.Reward
		r.Reward *= actions.Reward
	}
	if c.Has(BasisNLAssertion) {
		// No assertions (NeedsJudge said so): tau2's NL evaluator gives 1.
		r.Breakdown[BasisNLAssertion] = 1
	}
	if c.Has(BasisCommunicate) {
		r.Breakdown[BasisCommunicate] = comm.Reward
		r.Reward *= comm.Reward
	}
	return r, nil
}

// evaluateEnv is EnvironmentEvaluator.calculate_reward.
func evaluateEnv(d domain.Data, task *Task, trajectory []Message) (*Reward, error) {
	c := task.EvaluationCriteria
	if c.Actions == nil && c.EnvAssertions == nil {
		return &Reward{Reward: 1, DBCheck: &DBCheck{Match: true, Reward: 1}, Note: "No expected actions or env assertions"}, nil
	}
	var history []Message
	if task.InitialState != nil {
		for i, raw := range task.InitialState.MessageHistory {
			var m Message
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("task %s: initial_state.message_history[%d]: %w", task.ID, i, err)
			}
			history = append(history, m)
		}
	}
	predicted, err := NewWorld(d)
	if err != nil {
		return nil, err
	}
	if err := predicted.SetState(task.InitialState, trajectory); err != nil {
		return nil, fmt.Errorf("grading task %s: replaying the conversation: %w", task.ID, err)
	}
	gold, err := NewWorld(d)
	if err != nil {
		return nil, err
	}
	if err := gold.SetState(task.InitialState, history); err != nil {
		return nil, fmt.Errorf("grading task %s: setting up the gold environment: %w", task.ID, err)
	}
	if c.Actions != nil {
		for i, a := range *c.Actions {
			// tau2 makes the call directly (make_tool_call, no sync) and
			// only logs a failure.
			_, _ = gold.makeToolCall(ToolCall{ID: fmt.Sprintf("gold_%d", i), Name: a.Name, Arguments: a.Arguments, Requestor: a.By()})
		}
	}
	ga, gu, err := gold.Hashes()
	if err != nil {
		return nil, err
	}
	pa, pu, err := predicted.Hashes()
	if err != nil {
		return nil, err
	}
	db := &DBCheck{Match: ga == pa && gu == pu}
	if db.Match {
		db.Reward = 1
	}
	r := &Reward{Reward: 1, DBCheck: db, Breakdown: map[string]float64{}}
	envReward := 1.0
	if c.EnvAssertions != nil {
		for _, a := range *c.EnvAssertions {
			met, err := predicted.Assert(a)
			if err != nil {
				return nil, fmt.Errorf("grading task %s: %w", task.ID, err)
			}
			r.EnvChecks = append(r.EnvChecks, EnvCheck{Assertion: a, Met: met})
			if !met {
				envReward = 0
			}
		}
	}
	if c.Has(BasisDB) {
		r.Breakdown[BasisDB] = db.Reward
		r.Reward *= db.Reward
	}
	if c.Has(BasisEnvAssertion) {
		r.Breakdown[BasisEnvAssertion] = envReward
		r.Reward *= envReward
	}
	return r, nil
}

// evaluateActions is ActionEvaluator.calculate_reward: every gold action
// matched by some tool call of the agent or the user.
func evaluateActions(c *EvaluationCriteria, trajectory []Message) *Reward {
	if c.Actions == nil || len(*c.Actions) == 0 {
		return &Reward{Reward: 1}
	}
	var calls []ToolCall
	for _, m := range trajectory {
		if m.Role == "assistant" || m.Role == "user" {
			calls = append(calls, m.ToolCalls...)
		}
	}
	r := &Reward{Reward: 1}
	for _, a := range *c.Actions {
		found := false
		for _, tc := range calls {
			if actionMatches(a, tc) {
				found = true
				break
			}
		}
		r.Actions = append(r.Actions, ActionCheck{Action: a, Match: found})
		if !found {
			r.Reward = 0
		}
	}
	return r
}

// actionMatches is Action.compare_with_tool_call: same name, and the
// arguments named by compare_args (all of the tool call's when unset)
// equal as Python compares them.
func actionMatches(a Action, tc ToolCall) bool {
	if a.Name != tc.Name {
		return false
	}
	var got, want map[string]any
	if json.Unmarshal(tc.Arguments, &got) != nil || got == nil {
		// Not an object (tau2 could not have made the call at all).
		return false
	}
	_ = json.Unmarshal(a.Arguments, &want)
	var keys []string
	if a.CompareArgs == nil {
		for k := range got {
			keys = append(keys, k)
		}
	} else {
		keys = *a.CompareArgs
	}
	if len(keys) == 0 {
		return true
	}
	pick := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	return reflect.DeepEqual(pick(got), pick(want))
}

// evaluateCommunicate is CommunicateEvaluator.calculate_reward: each
// piece of information appears, case-insensitively, in some assistant
// message with its commas removed.
func evaluateCommunicate(c *EvaluationCriteria, trajectory []Message) *Reward {
	r := &Reward{Reward: 1}
	for _, info := range c.CommunicateInfo {
		met := false
		for _, m := range trajectory {
			if m.Role != "assistant" || strings.TrimSpace(m.Content) == "" {
				continue // has_text_content
			}
			if strings.Contains(strings.ReplaceAll(strings.ToLower(m.Content), ",", ""), strings.ToLower(info)) {
				met = true
				break
			}
		}
		r.Communicate = append(r.Communicate, CommunicateCheck{Info: info, Met: met})
		if !met {
			r.Reward = 0
		}
	}
	return r
}

// Failed says which checks failed, for the verdict's reason.
func (r *Reward) Failed() []string {
	var out []string
	if r.Note != "" && r.Reward == 0 {
		out = append(out, r.Note)
	}
	basis := map[string]bool{}
	for _, b := range r.RewardBasis {
		basis[b] = true
	}
	if basis[BasisDB] && r.DBCheck != nil && !r.DBCheck.Match {
		out = append(out, "DB: the databases differ from the gold environment's after the gold actions")
	}
	if basis[BasisEnvAssertion] {
		for _, e := range r.EnvChecks {
			if !e.Met {
				out = append(out, fmt.Sprintf("ENV_ASSERTION: %s(%s) is not %v", e.Assertion.FuncName, e.Assertion.Arguments, e.Assertion.Want()))
			}
		}
	}
	if basis[BasisAction] {
		for _, a := range r.Actions {
			if !a.Match {
				out = append(out, fmt.Sprintf("ACTION: no tool call matched %s %s(%s)", a.Action.ActionID, a.Action.Name, a.Action.Arguments))
			}
		}
	}
	if basis[BasisCommunicate] {
		for _, c := range r.Communicate {
			if !c.Met {
				out = append(out, fmt.Sprintf("COMMUNICATE: %q was not communicated", c.Info))
			}
		}
	}
	return out
}

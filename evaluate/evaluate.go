// Package evaluate scores a finished trial: the output of a plain model call,
// or an agent's trajectory, diff and checker verdict. Each evaluator turns a
// Trial into named scores; Aggregate turns the scores of a run into means and
// pass@k / pass^k.
//
// Score names are those of the run spec documentation's Grading table and are
// part of the CLI contract (`--json`, `--fail-under`), so they never change.
//
// An evaluator that cannot score a trial (the record lacks `expected`, the
// judge kept answering with unusable output, there is no checker verdict)
// returns an error; the engine records it as an evaluator error for that
// trial. A failure to score is never reported as a score of 0.
//
// Decisions worth knowing when reading scores:
//   - json-valid accepts an output that is exactly one ```json (or bare ```)
//     fence around valid JSON; JSON inside prose does not count.
//   - code-quality reports the judge's weighted mean on its 1–5 scale and
//     mergeable (every dimension ≥ merge_bar). An empty diff is a legitimate
//     outcome and is not sent to the judge: code-quality 1, mergeable 0. No
//     recorded diff at all (workdir not a git repository) is an error.
//   - policy-clean counts sandbox policy events only; escalation requests,
//     granted or denied, are counted apart in escalation-requests.
//   - loops treats calls as identical when tool, arguments (as JSON) and
//     result agree, so re-running tests after an edit is not a loop.
//   - tool-call-accuracy and trajectory-match read metadata.expected_tool_calls
//     / expected.tool_calls and metadata.expected_trajectory /
//     expected.trajectory (see trajectory.go); a record without them is an
//     error naming it.
//   - Aggregate's pass signal for pass@k is task-success when configured,
//     else every pass evaluator of the run (see passRules).
//
// Judge evaluators (llm-judge, code-quality, goal-completion) call the run's
// judge connector. A judge reply is searched for its JSON object (whole
// reply, fenced blocks, objects inside prose); an unusable reply is sent
// back with what was wrong, up to two more times, then it is an error. Each judge conversation's first user message begins with
// the line "Evaluator: NAME", so a scripted judge can select its replies with
// a rule such as `contains: "Evaluator: code-quality"`.
package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Trial is a finished trial as evaluators see it.
type Trial struct {
	Record spec.Record
	// Output is the model's answer (plain runs) or the agent's final message.
	Output string
	Events []trajectory.Event
	// Diff is the agent's change against HEAD plus untracked files; HasDiff is
	// false when no diff was recorded (the workdir is not a git repository).
	Diff    string
	HasDiff bool
	// Verdict is the checker's verdict; nil when the environment has no checker.
	Verdict *trajectory.Checker
	// Usage and CostUSD are the agent's (or the target model's) spend.
	Usage   trajectory.Usage
	CostUSD float64
	// Steps is the number of agent model calls as the harness counted them.
	Steps int
	// StopReason is why the agent loop ended (trajectory.Stop reasons).
	StopReason string
	// Budget is the harness's budget; nil when none was set.
	Budget *spec.Budget
	// Agent is true for agent runs, false for plain model evals.
	Agent bool
}

// Score is one named number an evaluator produced for a trial.
type Score struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Details explain the value (a judge's reasoning, what matched); may be nil.
	Details json.RawMessage `json:"details,omitempty"`
}

// Evaluator scores a finished trial. Evaluators hold only their options, so
// one value is safe for concurrent use across trials.
type Evaluator interface {
	// Name is the evaluator's name as written in the spec.
	Name() string
	Evaluate(ctx context.Context, t Trial) ([]Score, error)
}

// Evaluator names, as written in a spec's `evaluators` list.
const (
	ExactMatch       = "exact-match"
	Includes         = "includes"
	Regex            = "regex"
	JSONValid        = "json-valid"
	LLMJudge         = "llm-judge"
	TaskSuccess      = "task-success"
	CodeQuality      = "code-quality"
	PolicyViolations = "policy-violations"
	AgentEfficiency  = "agent-efficiency"
	ToolCallAccuracy = "tool-call-accuracy"
	TrajectoryMatch  = "trajectory-match"
	Loops            = "loops"
	GoalCompletion   = "goal-completion"
)

// info describes one evaluator: the scores it reports, whether it needs the
// judge, and how to build it.
type info struct {
	scores []string
	judge  bool
	build  func(cfg spec.Evaluator, judge model.Connector) (Evaluator, error)
}

// catalog returns the evaluator table. It is a function rather than a
// package-level map so that nothing can mutate it.
func catalog() map[string]info {
	return map[string]info{
		ExactMatch: {scores: []string{"exact-match"}, build: newExactMatch},
		Includes:   {scores: []string{"includes"}, build: newIncludes},
		Regex:      {scores: []string{"regex"}, build: newRegex},
		JSONValid:  {scores: []string{"json-valid"}, build: newJSONValid},
		LLMJudge:   {scores: []string{"llm-judge"}, judge: true, build: newLLMJudge},

		TaskSuccess:      {scores: []string{"task-success", "task-score"}, build: newTaskSuccess},
		CodeQuality:      {scores: []string{"code-quality", "mergeable"}, judge: true, build: newCodeQuality},
		PolicyViolations: {scores: []string{"policy-clean", "policy-events", "escalation-requests"}, build: newPolicyViolations},
		AgentEfficiency:  {scores: []string{"within-budget", "agent-steps", "agent-tokens", "agent-cost-usd"}, build: newAgentEfficiency},

		ToolCallAccuracy: {scores: []string{"tool-call-precision", "tool-call-recall", "tool-call-f1"}, build: newToolCallAccuracy},
		TrajectoryMatch:  {scores: []string{"trajectory-match"}, build: newTrajectoryMatch},
		Loops:            {scores: []string{"loops", "loop-detected"}, build: newLoops},
		GoalCompletion:   {scores: []string{"goal-completion"}, judge: true, build: newGoalCompletion},
	}
}

// Names lists every evaluator name, sorted.
func Names() []string {
	c := catalog()
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Known reports whether name is an evaluator.
func Known(name string) bool {
	_, ok := catalog()[name]
	return ok
}

// NeedsJudge reports whether the named evaluator calls the judge model.
func NeedsJudge(name string) bool { return catalog()[name].judge }

// ScoreNames lists the score names the named evaluator reports, in order;
// nil for an unknown evaluator. Useful to check `--fail-under NAME=VALUE`.
func ScoreNames(name string) []string { return slices.Clone(catalog()[name].scores) }

// New builds the evaluator cfg names. judge is the run's judge connector; it
// may be nil when no evaluator needs it.
func New(cfg spec.Evaluator, judge model.Connector) (Evaluator, error) {
	in, ok := catalog()[cfg.Name]
	if !ok {
		return nil, fmt.Errorf("unknown evaluator %q: use one of %s", cfg.Name, strings.Join(Names(), ", "))
	}
	if in.judge && judge == nil {
		return nil, fmt.Errorf("evaluator %q needs a judge model: set `judge` in the spec (connector and model) or pass --judge-provider and --judge-model", cfg.Name)
	}
	ev, err := in.build(cfg, judge)
	if err != nil {
		return nil, fmt.Errorf("evaluator %q: %w", cfg.Name, err)
	}
	return ev, nil
}

// details encodes v for Score.Details. The values passed are plain data, so
// encoding cannot fail; a failure would be a programming error.
func details(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("evaluate: encoding score details: %v", err))
	}
	return b
}

// b2f maps a boolean to the 1/0 value of a pass score.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

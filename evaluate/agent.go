package evaluate

import (
	"context"
	"fmt"
	"strings"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// This file holds the agent-run evaluators that read the checker's verdict,
// the policy events and the spend.

type taskSuccess struct{}

func newTaskSuccess(spec.Evaluator, model.Connector) (Evaluator, error) { return taskSuccess{}, nil }

func (taskSuccess) Name() string { return TaskSuccess }

// Evaluate reports the checker's verdict: task-success is 1 when it passed,
// task-score is its score.
func (taskSuccess) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	v := t.Verdict
	if v == nil {
		return nil, fmt.Errorf("record %q: no checker verdict: task-success reads the environment's checker, so the environment needs a `checker`", t.Record.ID)
	}
	d := map[string]any{"exit_code": v.ExitCode}
	if v.Details != "" {
		d["details"] = v.Details
	}
	return []Score{
		{Name: "task-success", Value: b2f(v.Pass), Details: details(d)},
		{Name: "task-score", Value: v.Score},
	}, nil
}

// requireAgent refuses to score a plain model eval with an agent evaluator:
// it has no sandbox and no agent loop, so a clean or within-budget score
// would be meaningless.
func requireAgent(evaluator string, t Trial) error {
	if !t.Agent {
		return fmt.Errorf("record %q: %s scores agent runs, and this is a plain model eval: give the spec `target.agent` or `harness`, or drop the evaluator", t.Record.ID, evaluator)
	}
	return nil
}

type policyViolations struct{}

func newPolicyViolations(spec.Evaluator, model.Connector) (Evaluator, error) {
	return policyViolations{}, nil
}

func (policyViolations) Name() string { return PolicyViolations }

// policyNote is one policy event or escalation as Details show it.
type policyNote struct {
	Step    int    `json:"step,omitempty"`
	Kind    string `json:"kind"`
	Host    string `json:"host,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Granted *bool  `json:"granted,omitempty"`
}

// maxPolicyNotes bounds the events listed in Details; the counts are exact.
const maxPolicyNotes = 50

// Evaluate counts sandbox policy events (refused hosts, OOM kills, limits
// hit) and escalation requests. policy-clean is 1 when there was no policy
// event. Escalation requests are counted apart and do not make a run
// unclean: asking is the sanctioned way to need more, and a denied request
// is the harness working as intended.
func (policyViolations) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	if err := requireAgent(PolicyViolations, t); err != nil {
		return nil, err
	}
	var policies, escalations []policyNote
	nPolicy, nEsc := 0, 0
	for _, e := range t.Events {
		switch {
		case e.Kind == trajectory.KindPolicy && e.Policy != nil:
			nPolicy++
			if len(policies) < maxPolicyNotes {
				policies = append(policies, policyNote{Step: e.Step, Kind: e.Policy.Kind, Host: e.Policy.Host, Detail: e.Policy.Detail})
			}
		case e.Kind == trajectory.KindEscalation && e.Escalation != nil:
			nEsc++
			if len(escalations) < maxPolicyNotes {
				g := e.Escalation.Granted
				escalations = append(escalations, policyNote{Step: e.Step, Kind: e.Escalation.Kind, Detail: e.Escalation.Reason, Granted: &g})
			}
		}
	}
	var clean Score
	clean.Name, clean.Value = "policy-clean", b2f(nPolicy == 0)
	if nPolicy > 0 {
		clean.Details = details(map[string]any{"events": policies})
	}
	esc := Score{Name: "escalation-requests", Value: float64(nEsc)}
	if nEsc > 0 {
		esc.Details = details(map[string]any{"requests": escalations})
	}
	return []Score{clean, {Name: "policy-events", Value: float64(nPolicy)}, esc}, nil
}

type agentEfficiency struct{}

func newAgentEfficiency(spec.Evaluator, model.Connector) (Evaluator, error) {
	return agentEfficiency{}, nil
}

func (agentEfficiency) Name() string { return AgentEfficiency }

// budgetStop reports whether a stop reason means a limit cut the agent off.
func budgetStop(reason string) bool {
	return reason == "max_steps" || reason == "wall_clock" || strings.HasPrefix(reason, "budget")
}

// Evaluate reports the agent's spend. agent-steps counts the agent's model
// calls in the trajectory (judge and user-simulator calls excluded), falling
// back to the harness's count when the trajectory has no model calls;
// agent-tokens and agent-cost-usd are the trial's totals, falling back to
// the sum over the trajectory's agent model calls when the trial has none.
// within-budget is 0 when a limit stopped the agent (max_steps, a budget,
// wall_clock) or the spend exceeds the budget.
func (agentEfficiency) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	if err := requireAgent(AgentEfficiency, t); err != nil {
		return nil, err
	}
	steps := 0
	var usage trajectory.Usage
	var cost float64
	stop := t.StopReason
	for _, e := range t.Events {
		switch {
		case e.Kind == trajectory.KindModelCall && e.ModelCall != nil:
			if r := e.ModelCall.Role; r == "" || r == "agent" {
				steps++
				usage = usage.Add(e.ModelCall.Usage)
				cost += e.ModelCall.CostUSD
			}
		case e.Kind == trajectory.KindStop && e.Stop != nil && t.StopReason == "":
			stop = e.Stop.Reason
		}
	}
	if steps == 0 {
		steps = t.Steps
	}
	if t.Usage.Total() > 0 {
		usage = t.Usage
	}
	if t.CostUSD > 0 {
		cost = t.CostUSD
	}
	within := true
	var why string
	switch b := t.Budget; {
	case budgetStop(stop):
		within, why = false, "stopped by "+stop
	case b != nil && b.USD > 0 && cost > b.USD:
		within, why = false, fmt.Sprintf("spent $%.4f of a $%.4f budget", cost, b.USD)
	case b != nil && b.Tokens > 0 && usage.Total() > b.Tokens:
		within, why = false, fmt.Sprintf("used %d of a %d-token budget", usage.Total(), b.Tokens)
	}
	wb := Score{Name: "within-budget", Value: b2f(within)}
	d := map[string]any{}
	if stop != "" {
		d["stop_reason"] = stop
	}
	if why != "" {
		d["reason"] = why
	}
	if len(d) > 0 {
		wb.Details = details(d)
	}
	return []Score{
		wb,
		{Name: "agent-steps", Value: float64(steps)},
		{Name: "agent-tokens", Value: float64(usage.Total()), Details: details(usage)},
		{Name: "agent-cost-usd", Value: cost},
	}, nil
}

package engine

import (
	"evals.si/evaluate"
	"evals.si/spec"
)

// EvaluatorsOf are the evaluator configs in effect for a spec: its own, or
// the defaults (an agent run is graded by its checker, policy and
// efficiency; a plain run by exact match). The planner wires them, and a
// finalizer that never planned the run aggregates by the same list.
func EvaluatorsOf(s *spec.Spec) []spec.Evaluator {
	if len(s.Evaluators) > 0 {
		return s.Evaluators
	}
	if s.IsAgentRun() {
		return []spec.Evaluator{{Name: "task-success"}, {Name: "policy-violations"}, {Name: "agent-efficiency"}}
	}
	return []spec.Evaluator{{Name: "exact-match"}}
}

// PassScore is the score that counts as passing in live progress.
func PassScore(evs []spec.Evaluator) string {
	for _, e := range evs {
		if e.Name == "task-success" {
			return "task-success"
		}
	}
	if len(evs) > 0 {
		if names := evaluate.ScoreNames(evs[0].Name); len(names) > 0 {
			return names[0]
		}
	}
	return ""
}

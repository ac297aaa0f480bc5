package engine

import (
	"context"
	"fmt"

	"evals.si/agent"
	"evals.si/evaluate"
	"evals.si/trajectory"
)

// runWithoutSandbox runs a trial of an agent that needs no sandbox: no
// environment, no diff, no checker; the agent's own verdict is the grade.
// A record that asks for an environment is refused rather than run without
// the isolation it expects.
func (r *AgentRunner) runWithoutSandbox(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	if _, ok := tc.Record.Metadata["environment"]; ok {
		return nil, &NonRetryable{Err: fmt.Errorf("record %q sets metadata.environment, but the run's harness works without a sandbox", tc.Record.ID)}
	}
	task := agent.Task{
		RecordID:    tc.Record.ID,
		Trial:       tc.Trial,
		Instruction: tc.Record.Input.Prompt(),
		Metadata:    tc.Record.Metadata,
		Emit:        tc.Emit,
	}
	if tc.Record.Input.Messages != nil {
		task.Input = inputMessages(tc.Record.Input)
	}
	if task.User = r.User; task.User != nil {
		if b, ok := r.User.(taskUser); ok {
			task.User = b.ForTask(task.RecordID, task.Trial, task.Emit)
		}
	}
	res, err := r.Agent.Run(ctx, task)
	if err != nil {
		return &Outcome{Usage: res.Usage, CostUSD: res.CostUSD}, agentErr(err)
	}
	o := &Outcome{Output: res.Output, Usage: res.Usage, CostUSD: res.CostUSD, Verdict: res.Verdict}
	if o.Verdict != nil {
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindChecker, Checker: o.Verdict})
	}
	events, err := r.collect(tc)
	if err != nil {
		return nil, err
	}
	o.Evaluations = runEvaluators(ctx, tc.Emit, r.Evaluators, evaluate.Trial{
		Record: tc.Record, Output: res.Output, Events: events,
		Verdict: o.Verdict, Usage: res.Usage, CostUSD: res.CostUSD, Steps: res.Steps,
		StopReason: res.StopReason, Budget: r.Budget, Agent: true,
	})
	return o, nil
}

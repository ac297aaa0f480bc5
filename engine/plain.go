package engine

import (
	"context"
	"fmt"
	"time"

	"evals.si/evaluate"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// PlainRunner runs a plain model eval: the target answers each record's
// input and the evaluators score the output.
type PlainRunner struct {
	Target     model.Connector
	Model      string
	Pricing    model.Pricing
	Evaluators []evaluate.Evaluator
}

// RunTrial asks the model and scores its answer.
func (r *PlainRunner) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	msgs := inputMessages(tc.Record.Input)
	for _, m := range msgs {
		if err := tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &m}); err != nil {
			return nil, fmt.Errorf("recording input: %w", err)
		}
	}
	start := time.Now()
	resp, err := TimedConnector(r.Target).Chat(ctx, model.Request{Messages: msgs, RecordID: tc.Record.ID, Trial: tc.Trial})
	if err != nil {
		// The connector's error names the provider, model and endpoint;
		// the kind (model) is shown beside it, as for an agent's call.
		return nil, &kindError{kind: "model", err: err}
	}
	cost, _ := r.Pricing.Cost(r.Model, resp.Usage)
	if err := tc.Emit.Emit(trajectory.Event{
		Kind: trajectory.KindModelCall, Step: 1, DurationMS: time.Since(start).Milliseconds(),
		ModelCall: &trajectory.ModelCall{Model: r.Model, Usage: resp.Usage, CostUSD: cost, StopReason: resp.StopReason,
			Provider: resp.Provider, RequestModel: r.Model, ResponseModel: resp.Model, ResponseID: resp.ID},
	}); err != nil {
		return nil, fmt.Errorf("recording model call: %w", err)
	}
	answer := resp.Message
	answer.Role = trajectory.RoleAssistant
	if err := tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: 1, Message: &answer}); err != nil {
		return nil, fmt.Errorf("recording answer: %w", err)
	}
	o := &Outcome{Output: answer.Content, Usage: resp.Usage, CostUSD: cost}
	o.Evaluations = runEvaluators(ctx, tc.Emit, r.Evaluators, evaluate.Trial{
		Record: tc.Record, Output: answer.Content, Usage: resp.Usage, CostUSD: cost, Steps: 1,
	})
	return o, nil
}

func inputMessages(in spec.Input) []trajectory.Message {
	if in.Messages == nil {
		return []trajectory.Message{{Role: trajectory.RoleUser, Content: in.Text}}
	}
	out := make([]trajectory.Message, 0, len(in.Messages))
	for _, m := range in.Messages {
		out = append(out, trajectory.Message{Role: m.Role, Content: m.Content})
	}
	return out
}

// runEvaluators runs every evaluator; one that cannot score records its
// error (also as a trajectory error event), never a silent 0.
func runEvaluators(ctx context.Context, emit trajectory.Sink, evs []evaluate.Evaluator, t evaluate.Trial) []evaluate.EvaluatorResult {
	out := make([]evaluate.EvaluatorResult, 0, len(evs))
	for _, ev := range evs {
		ectx, done := evaluatorSpan(ctx, ev.Name())
		s, err := ev.Evaluate(ectx, t)
		done(err)
		r := evaluate.EvaluatorResult{Evaluator: ev.Name(), Scores: s}
		if err != nil {
			r.Scores = nil
			r.Err = err.Error()
			_ = emit.Emit(trajectory.Event{Kind: trajectory.KindError, Error: &trajectory.Error{Kind: "evaluator " + ev.Name(), Message: r.Err}})
		}
		out = append(out, r)
	}
	return out
}

type kindError struct {
	kind string
	err  error
}

func (e *kindError) Error() string     { return e.err.Error() }
func (e *kindError) Unwrap() error     { return e.err }
func (e *kindError) ErrorKind() string { return e.kind }

package telemetry

import (
	"cmp"
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/trajectory"
)

// phaseNames are the span names of the attempt's timed phases
// (engine.Timing.Spans) other than evaluators and model calls.
var phaseNames = map[string]string{
	engine.SpanSetup:            "evalsi.setup",
	engine.SpanCheckerPreflight: "evalsi.checker.preflight",
	engine.SpanSandbox:          "evalsi.sandbox.create",
	engine.SpanCheckerSandbox:   "evalsi.checker.sandbox.create",
}

// timedSpans records the parts of the attempt the engine timed and no
// event records: setup, sandbox creation, each evaluator with its score
// (and, under it, its judge's model calls), and the target's failed model
// calls.
func (r *recorder) timedSpans(ts *trialSpan, o *engine.Outcome) {
	results := map[string]evaluate.EvaluatorResult{}
	for _, ev := range o.Evaluations {
		results[ev.Evaluator] = ev
	}
	// Evaluator spans first: their judge calls are their children.
	evalCtx := map[string]context.Context{}
	for _, s := range o.Timing.Spans {
		if s.Name != engine.SpanEvaluator {
			continue
		}
		attrs := append(append([]attribute.KeyValue{}, ts.ids...), attribute.String(AttrEvaluator, s.Evaluator),
			attribute.String(AttrEvalName, s.Evaluator))
		res := results[s.Evaluator]
		for i, sc := range res.Scores {
			if i == 0 {
				attrs = append(attrs, attribute.Float64(AttrEvalScore, sc.Value))
			}
			attrs = append(attrs, attribute.Float64("evalsi.score."+sc.Name, sc.Value))
		}
		ctx, span := r.tracer.Start(ts.ctx, "evalsi.evaluator "+s.Evaluator, trace.WithTimestamp(s.Start),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
		if msg := cmp.Or(s.Err, res.Err); msg != "" {
			r.setError(span, msg)
		}
		span.End(trace.WithTimestamp(s.End))
		evalCtx[s.Evaluator] = ctx
	}
	for _, s := range o.Timing.Spans {
		switch {
		case s.Name == engine.SpanModelCall && s.Call != nil:
			parent, role := ts.ctx, "agent"
			if s.Evaluator != "" {
				role = "judge"
				if c, ok := evalCtx[s.Evaluator]; ok {
					parent = c
				}
			}
			c := s.Call
			mc := &trajectory.ModelCall{Model: c.RequestModel, RequestModel: c.RequestModel, Provider: c.Provider}
			if c.Err == nil {
				resp := c.Response
				mc.Usage, mc.StopReason, mc.ResponseModel, mc.ResponseID = resp.Usage, resp.StopReason, resp.Model, resp.ID
			}
			attrs := append(append([]attribute.KeyValue{}, ts.ids...), modelAttrs(mc)...)
			attrs = append(attrs, attribute.String(AttrOperation, OpChat), attribute.String(AttrModelRole, role))
			if s.Evaluator != "" {
				attrs = append(attrs, attribute.String(AttrEvaluator, s.Evaluator))
			}
			if s.Err != "" {
				attrs = append(attrs, attribute.String(AttrErrorType, s.ErrorType))
			}
			_, span := r.tracer.Start(parent, OpChat+" "+c.RequestModel, trace.WithTimestamp(s.Start),
				trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			if s.Err != "" {
				r.setError(span, s.Err)
			}
			span.End(trace.WithTimestamp(s.End))
		case s.Name == engine.SpanAgentCall:
			// A call to a remote agent: the GenAI conventions' client
			// invoke_agent span.
			attrs := append(append([]attribute.KeyValue{}, ts.ids...), attribute.String(AttrOperation, OpInvokeAgent),
				attribute.String(AttrAgentName, ts.agent.name))
			attrs = append(attrs, ts.agent.serverAttrs()...)
			if ts.agent.provider != "" && ts.agent.kind == "responses" {
				attrs = append(attrs, attribute.String(AttrProvider, ts.agent.provider), attribute.String(AttrModel, ts.agent.model))
			}
			if s.Err != "" {
				attrs = append(attrs, attribute.String(AttrErrorType, "agent"))
			}
			_, span := r.tracer.Start(ts.ctx, OpInvokeAgent+" "+ts.agent.name, trace.WithTimestamp(s.Start),
				trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			if s.Err != "" {
				r.setError(span, s.Err)
			}
			span.End(trace.WithTimestamp(s.End))
		case phaseNames[s.Name] != "":
			var fail *string
			if s.Err != "" {
				fail = &s.Err
			}
			r.span(ts, phaseNames[s.Name], trace.SpanKindInternal, s.Start, s.End, append([]attribute.KeyValue{}, ts.ids...), fail)
		}
	}
}

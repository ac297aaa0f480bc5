package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"evals.si/engine"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Attribute keys.
const (
	AttrRunID     = "evalsi.run_id"
	AttrRunName   = "evalsi.run_name"
	AttrRecordID  = "evalsi.record_id"
	AttrTrial     = "evalsi.trial"
	AttrTrialID   = "evalsi.trial_id"
	AttrAttempt   = "evalsi.attempt"
	AttrStep      = "evalsi.step"
	AttrCostUSD   = "evalsi.cost_usd"
	AttrStatus    = "evalsi.status"
	AttrPassed    = "evalsi.passed"
	AttrErrorKind = "evalsi.error_kind"
	AttrExitCode  = "evalsi.exit_code"

	AttrEvaluator = "evalsi.evaluator"
	AttrModelRole = "evalsi.model_role"

	AttrOperation     = "gen_ai.operation.name"
	AttrProvider      = "gen_ai.provider.name"
	AttrAgentName     = "gen_ai.agent.name"
	AttrModel         = "gen_ai.request.model"
	AttrResponseModel = "gen_ai.response.model"
	AttrResponseID    = "gen_ai.response.id"
	AttrInputTokens   = "gen_ai.usage.input_tokens"
	AttrOutputTokens  = "gen_ai.usage.output_tokens"
	AttrFinish        = "gen_ai.response.finish_reasons"
	AttrToolName      = "gen_ai.tool.name"
	AttrToolType      = "gen_ai.tool.type"
	AttrToolCallID    = "gen_ai.tool.call.id"
	AttrEvalName      = "gen_ai.evaluation.name"
	AttrEvalScore     = "gen_ai.evaluation.score.value"
	AttrErrorType     = "error.type"
)

// Operation names (gen_ai.operation.name).
const (
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// recorder turns what a run records into spans: the run's span from its
// start and finish (RunStarted, RunFinished), and each attempt's span and
// its children from what a worker leases and records through the queue
// (Queue). In embedded mode both happen in one process and the attempts'
// spans are children of the run's; a remote worker's attempts are roots
// carrying the run id.
type recorder struct {
	tracer trace.Tracer
	// content puts inputs and outputs on trial spans (content.go).
	content capture

	mu     sync.Mutex
	runs   map[string]*runSpan
	trials map[string]*trialSpan
}

func newRecorder(tracer trace.Tracer, opts ...Option) *recorder {
	r := &recorder{tracer: tracer, runs: map[string]*runSpan{}, trials: map[string]*trialSpan{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// RunInfo describes a run that started.
type RunInfo struct {
	ID, Name, SpecPath string
	Records, Trials    int
	// Spec, when set, names the agent under test on the trials' spans
	// (gen_ai.agent.name) and says whether it is a remote agent, whose
	// calls are spans of their own.
	Spec *spec.Spec
}

type runSpan struct {
	ctx   context.Context // carries the run span
	span  trace.Span
	agent agentInfo
}

type trialSpan struct {
	ctx   context.Context // carries the trial span
	span  trace.Span
	agent agentInfo
	// ids are the identity attributes every span of the trial carries.
	ids []attribute.KeyValue
	// calls are tool calls waiting for their result, by call id.
	calls map[string]pendingCall
}

type pendingCall struct {
	call trajectory.ToolCall
	at   time.Time
	step int
}

func (r *recorder) runStarted(ctx context.Context, ri RunInfo) {
	// The run is a root: a trace per run, whatever span the caller has.
	sctx, span := r.tracer.Start(context.WithoutCancel(ctx), "evalsi.run "+ri.Name,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(AttrRunID, ri.ID), attribute.String(AttrRunName, ri.Name),
			attribute.String("evalsi.spec_path", ri.SpecPath),
			attribute.Int("evalsi.records", ri.Records), attribute.Int("evalsi.trials_per_record", ri.Trials)))
	r.mu.Lock()
	r.runs[ri.ID] = &runSpan{ctx: sctx, span: span, agent: agentOf(ri.Spec)}
	r.mu.Unlock()
}

func (r *recorder) runFinished(runID, status string, sum *engine.Summary, errMsg string) {
	r.mu.Lock()
	rs := r.runs[runID]
	delete(r.runs, runID)
	r.mu.Unlock()
	if rs == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String(AttrStatus, status)}
	health := engine.HealthOK
	done := 0
	if sum != nil {
		// Trials is per record; the ones a budget did not start are not done.
		done = max(sum.Records*max(sum.Trials, 1)-sum.NotStarted, sum.Errored)
		health = engine.RunHealth(done, sum.Errored)
		attrs = append(attrs, attribute.Int("evalsi.errored", sum.Errored), attribute.Int("evalsi.trials_done", done),
			attribute.String("evalsi.status_label", engine.StatusLabel(status, done, sum.Errored)),
			attribute.String("evalsi.health", string(health)),
			attribute.Float64(AttrCostUSD, sum.CostUSD), attribute.Int("evalsi.tokens", sum.Tokens))
		for name, v := range sum.Scores {
			attrs = append(attrs, attribute.Float64("evalsi.score."+name, v))
		}
	}
	rs.span.SetAttributes(attrs...)
	switch {
	case errMsg != "":
		r.setError(rs.span, errMsg)
	case status != engine.StatusCompleted:
		r.setError(rs.span, "run "+status)
	case health == engine.HealthNoScores:
		r.setError(rs.span, fmt.Sprintf("every trial errored (%d of %d): nothing was scored", sum.Errored, done))
	case health == engine.HealthErrors:
		r.setError(rs.span, fmt.Sprintf("%d of %d trials errored", sum.Errored, done))
	}
	rs.span.End()
}

func (r *recorder) trialStarted(ctx context.Context, runID, id string, rec spec.Record, trial, attempt int) {
	ids := []attribute.KeyValue{attribute.String(AttrRunID, runID), attribute.String(AttrRecordID, rec.ID), attribute.Int(AttrTrial, trial)}
	r.mu.Lock()
	defer r.mu.Unlock()
	parent := context.WithoutCancel(ctx)
	ag := agentOf(nil)
	if rs := r.runs[runID]; rs != nil {
		parent, ag = rs.ctx, rs.agent
	}
	// The trial is the agent's invocation (the GenAI conventions'
	// invoke_agent span), named after the agent; the record is an attribute.
	attrs := append(ids, attribute.String(AttrTrialID, id), attribute.Int(AttrAttempt, attempt),
		attribute.String(AttrOperation, OpInvokeAgent), attribute.String(AttrAgentName, ag.name))
	if ag.provider != "" {
		attrs = append(attrs, attribute.String(AttrProvider, ag.provider))
	}
	if ag.model != "" {
		attrs = append(attrs, attribute.String(AttrModel, ag.model))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if r.content.enabled() {
		opts = append(opts, r.content.start(parent, rec)...)
	}
	sctx, span := r.tracer.Start(parent, OpInvokeAgent+" "+ag.name, opts...)
	r.trials[id] = &trialSpan{ctx: sctx, span: span, agent: ag, ids: ids, calls: map[string]pendingCall{}}
}

func (r *recorder) event(trialID string, e trajectory.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.trials[trialID]
	if ts == nil {
		return
	}
	end := e.Time
	if end.IsZero() {
		end = time.Now()
	}
	start := end.Add(-time.Duration(e.DurationMS) * time.Millisecond)
	attrs := append([]attribute.KeyValue{}, ts.ids...)
	if e.Step > 0 {
		attrs = append(attrs, attribute.Int(AttrStep, e.Step))
	}
	switch {
	case e.Kind == trajectory.KindModelCall && e.ModelCall != nil:
		mc := e.ModelCall
		role := mc.Role
		if role == "" {
			role = "agent"
		}
		attrs = append(attrs, modelAttrs(mc)...)
		attrs = append(attrs, attribute.Float64(AttrCostUSD, mc.CostUSD), attribute.String(AttrModelRole, role))
		attrs = append(attrs, attribute.String(AttrOperation, OpChat))
		r.span(ts, OpChat+" "+requestModel(mc), trace.SpanKindClient, start, end, attrs, nil)

	case e.Kind == trajectory.KindToolCall && e.ToolCall != nil:
		ts.calls[e.ToolCall.ID] = pendingCall{call: *e.ToolCall, at: end, step: e.Step}

	case e.Kind == trajectory.KindToolResult && e.ToolResult != nil:
		tr := e.ToolResult
		name := tr.Name
		if pc, ok := ts.calls[tr.CallID]; ok {
			delete(ts.calls, tr.CallID)
			if e.DurationMS == 0 {
				start = pc.at
			}
			if name == "" {
				// A result that does not repeat the tool's name (an HTTP
				// agent's tool message) answers the call that named it.
				name = pc.call.Name
			}
		}
		attrs = append(attrs, attribute.String(AttrOperation, OpExecuteTool), attribute.String(AttrToolName, name),
			attribute.String(AttrToolType, toolType(ts.agent, tr.Type)), attribute.String(AttrToolCallID, tr.CallID))
		if tr.ExitCode != nil {
			attrs = append(attrs, attribute.Int(AttrExitCode, *tr.ExitCode))
		}
		if tr.Truncated {
			attrs = append(attrs, attribute.Bool("evalsi.tool.truncated", true))
		}
		if tr.Fault != "" {
			attrs = append(attrs, attribute.String("evalsi.tool.fault", tr.Fault))
		}
		var fail *string
		if tr.IsError {
			msg := "the tool reported an error"
			fail = &msg
		}
		r.span(ts, OpExecuteTool+" "+name, trace.SpanKindInternal, start, end, attrs, fail)

	case e.Kind == trajectory.KindChecker && e.Checker != nil:
		c := e.Checker
		attrs = append(attrs, attribute.Bool(AttrPassed, c.Pass), attribute.Float64("evalsi.checker.score", c.Score),
			attribute.Int(AttrExitCode, c.ExitCode))
		r.span(ts, "evalsi.checker", trace.SpanKindInternal, start, end, attrs, nil)

	case e.Kind == trajectory.KindPolicy && e.Policy != nil:
		ts.span.AddEvent("evalsi.policy", trace.WithTimestamp(end), trace.WithAttributes(
			attribute.String("evalsi.policy.kind", e.Policy.Kind), attribute.String("evalsi.policy.host", e.Policy.Host),
			attribute.String("evalsi.policy.detail", e.Policy.Detail)))

	case e.Kind == trajectory.KindEscalation && e.Escalation != nil:
		ts.span.AddEvent("evalsi.escalation", trace.WithTimestamp(end), trace.WithAttributes(
			attribute.String("evalsi.escalation.kind", e.Escalation.Kind), attribute.Bool("evalsi.escalation.granted", e.Escalation.Granted)))

	case e.Kind == trajectory.KindError && e.Error != nil:
		ts.span.AddEvent("evalsi.error", trace.WithTimestamp(end), trace.WithAttributes(
			attribute.String(AttrErrorKind, e.Error.Kind), attribute.String("evalsi.error.message", e.Error.Message)))

	case e.Kind == trajectory.KindStop && e.Stop != nil:
		ts.span.SetAttributes(attribute.String("evalsi.stop_reason", e.Stop.Reason))
	}
}

// modelAttrs are a recorded model call's GenAI attributes.
func modelAttrs(mc *trajectory.ModelCall) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String(AttrModel, requestModel(mc)),
		attribute.Int(AttrInputTokens, mc.Usage.InputTokens), attribute.Int(AttrOutputTokens, mc.Usage.OutputTokens)}
	if mc.Provider != "" {
		attrs = append(attrs, attribute.String(AttrProvider, mc.Provider))
	}
	if m := cmp.Or(mc.ResponseModel, mc.Model); m != "" {
		attrs = append(attrs, attribute.String(AttrResponseModel, m))
	}
	if mc.ResponseID != "" {
		attrs = append(attrs, attribute.String(AttrResponseID, mc.ResponseID))
	}
	if mc.StopReason != "" {
		attrs = append(attrs, attribute.StringSlice(AttrFinish, []string{mc.StopReason}))
	}
	return attrs
}

func requestModel(mc *trajectory.ModelCall) string { return cmp.Or(mc.RequestModel, mc.Model) }

// toolType is gen_ai.tool.type: what the result says, else extension for
// the tools an agent runs itself (remote and CLI agents), function for
// those the harness runs for the model.
func toolType(a agentInfo, recorded string) string {
	switch {
	case recorded != "":
		return recorded
	case a.runsTools():
		return "extension"
	}
	return "function"
}

// span records a finished child span of the trial. Tool arguments and
// outputs are not attributes: they can be large and may hold what the
// task's files hold; the store has them.
func (r *recorder) span(ts *trialSpan, name string, kind trace.SpanKind, start, end time.Time, attrs []attribute.KeyValue, fail *string) {
	_, s := r.tracer.Start(ts.ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	if fail != nil {
		r.setError(s, *fail)
	}
	s.End(trace.WithTimestamp(end))
}

// trialFinished ends the attempt's span; o is nil when the attempt was
// dropped (its lease lost, or it could not be recorded), with why.
func (r *recorder) trialFinished(trialID string, o *engine.Outcome, dropped string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.trials[trialID]
	delete(r.trials, trialID)
	if ts == nil {
		return
	}
	now := time.Now()
	// A tool call with no result (the trial was cut short) still took time.
	for _, pc := range ts.calls {
		attrs := append(append([]attribute.KeyValue{}, ts.ids...), attribute.String(AttrOperation, OpExecuteTool),
			attribute.String(AttrToolName, pc.call.Name), attribute.String(AttrToolType, toolType(ts.agent, "")),
			attribute.String(AttrToolCallID, pc.call.ID), attribute.Int(AttrStep, pc.step))
		msg := "no result was recorded"
		r.span(ts, OpExecuteTool+" "+pc.call.Name, trace.SpanKindInternal, pc.at, now, attrs, &msg)
	}
	if o != nil {
		r.timedSpans(ts, o)
	}
	if o == nil {
		r.setError(ts.span, dropped)
		ts.span.End(trace.WithTimestamp(now))
		return
	}
	attrs := []attribute.KeyValue{attribute.String(AttrStatus, o.Status), attribute.Float64(AttrCostUSD, o.CostUSD),
		attribute.Int(AttrInputTokens, o.Usage.InputTokens), attribute.Int(AttrOutputTokens, o.Usage.OutputTokens)}
	if o.Verdict != nil {
		attrs = append(attrs, attribute.Bool(AttrPassed, o.Verdict.Pass))
	}
	for _, s := range o.Scores() {
		attrs = append(attrs, attribute.Float64("evalsi.score."+s.Name, s.Value))
	}
	if r.content.enabled() {
		attrs = append(attrs, r.content.end(o)...)
	}
	ts.span.SetAttributes(attrs...)
	if o.Status == engine.TrialErrored {
		ts.span.SetAttributes(attribute.String(AttrErrorKind, o.ErrorKind), attribute.String(AttrErrorType, o.ErrorKind))
		r.setError(ts.span, o.ErrorKind+": "+o.Error)
	}
	ts.span.End(trace.WithTimestamp(now))
}

// closeOpen ends the spans of attempts still open (interrupted).
func (r *recorder) closeOpen() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.trials))
	for id := range r.trials {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.trialFinished(id, nil, "interrupted before the attempt finished")
	}
}

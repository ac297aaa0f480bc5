package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"evals.si/engine"
	"evals.si/spec"
)

// runTrials records a run of three trials (text input, messages, an
// errored trial) and returns the spans by name.
func runTrials(t *testing.T, opts ...Option) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	r := newRecorder(tp.Tracer(TracerName), opts...)
	ctx := context.Background()
	r.runStarted(ctx, RunInfo{ID: "run1", Name: "r"})
	trials := []struct {
		rec spec.Record
		out *engine.Outcome
	}{
		{spec.Record{ID: "text", Input: spec.Input{Text: "What is 2+2?"}}, &engine.Outcome{Status: engine.TrialCompleted, Output: "4"}},
		{spec.Record{ID: "chat", Input: spec.Input{Messages: []spec.InputMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}}},
			&engine.Outcome{Status: engine.TrialCompleted, Output: "Hello, the key is sk-secret-123"}},
		{spec.Record{ID: "broke", Input: spec.Input{Text: "x"}}, &engine.Outcome{Status: engine.TrialErrored, ErrorKind: "model", Error: "boom"}},
	}
	for i, tr := range trials {
		id := fmt.Sprintf("trial%d", i)
		r.trialStarted(ctx, "run1", id, tr.rec, i, 0)
		r.trialFinished(id, tr.out, "")
	}
	r.runFinished("run1", engine.StatusCompleted, nil, "")
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		// Trial spans are named after the agent: key them by record.
		if rec, ok := attrOf(s, AttrRecordID); ok {
			spans["trial "+rec] = s
			continue
		}
		spans[s.Name()] = s
	}
	return spans
}

// redactKey stands for the store's RedactJSON with one secret registered.
func redactKey(b []byte) []byte {
	return []byte(strings.ReplaceAll(string(b), "sk-secret-123", "[redacted]"))
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}

// TestContentCapture: with content on, each trial span is the root of its
// own trace, linked to the run's span, carrying the record's input and
// the trial's output as the GenAI conventions' message JSON.
func TestContentCapture(t *testing.T) {
	spans := runTrials(t, WithContent(true), WithRedact(redactKey))
	run := spans["evalsi.run r"]
	for _, tc := range []struct {
		name, in, out string
		hasOut        bool
	}{
		{"trial text", `[{"role":"user","parts":[{"type":"text","content":"What is 2+2?"}]}]`,
			`[{"role":"assistant","parts":[{"type":"text","content":"4"}],"finish_reason":"stop"}]`, true},
		{"trial chat", `[{"role":"system","parts":[{"type":"text","content":"Be brief."}]},{"role":"user","parts":[{"type":"text","content":"Hi"}]}]`,
			`[{"role":"assistant","parts":[{"type":"text","content":"Hello, the key is [redacted]"}],"finish_reason":"stop"}]`, true},
		{"trial broke", `[{"role":"user","parts":[{"type":"text","content":"x"}]}]`, "", false},
	} {
		s := spans[tc.name]
		if s == nil {
			t.Fatalf("no span %q", tc.name)
		}
		if s.Parent().IsValid() || s.SpanContext().TraceID() == run.SpanContext().TraceID() {
			t.Errorf("%s: parent %v, trace %v; want the root of a trace of its own", tc.name, s.Parent(), s.SpanContext().TraceID())
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != run.SpanContext().SpanID() {
			t.Errorf("%s: links %v, want one to the run span", tc.name, l)
		}
		in, _ := attrOf(s, AttrInputMessages)
		if !json.Valid([]byte(in)) || in != tc.in {
			t.Errorf("%s: %s = %s, want %s", tc.name, AttrInputMessages, in, tc.in)
		}
		out, ok := attrOf(s, AttrOutputMessages)
		if ok != tc.hasOut || out != tc.out {
			t.Errorf("%s: %s = %q (%v), want %q", tc.name, AttrOutputMessages, out, ok, tc.out)
		}
	}
}

// TestContentOffByDefault: without the opt-in, or without a redactor, no
// content is on any span and trials stay children of the run; asking for
// content where nothing can redact it is refused.
func TestContentOffByDefault(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithContent(true)}, {WithContent(false), WithRedact(redactKey)}} {
		checkNoContent(t, runTrials(t, opts...))
	}
	if err := newRecorder(nil, WithContent(true)).checkCapture(); err == nil || !strings.Contains(err.Error(), CaptureContentEnv) {
		t.Errorf("content without a redactor: %v, want a refusal naming %s", err, CaptureContentEnv)
	}
	if err := newRecorder(nil, WithContent(true), WithRedact(redactKey)).checkCapture(); err != nil {
		t.Error(err)
	}
	for _, v := range []struct {
		val  string
		want bool
	}{{"true", true}, {"TRUE", true}, {" true ", true}, {"false", false}, {"", false}, {"1", false}} {
		if got := CaptureContent(func(string) string { return v.val }); got != v.want {
			t.Errorf("%s=%q: capture %v, want %v", CaptureContentEnv, v.val, got, v.want)
		}
	}
}

func checkNoContent(t *testing.T, spans map[string]sdktrace.ReadOnlySpan) {
	t.Helper()
	run := spans["evalsi.run r"]
	for name, s := range spans {
		for _, k := range []string{AttrInputMessages, AttrOutputMessages} {
			if v, ok := attrOf(s, k); ok {
				t.Errorf("%s carries %s = %s", name, k, v)
			}
		}
		if name != "evalsi.run r" && s.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the run span", name)
		}
	}
}

// TestErrorTextRedacted: error text reaches span statuses with content
// capture off too, so it goes through the store's redaction: a trial
// error quoting a secret never leaves the host with it.
func TestErrorTextRedacted(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	r := newRecorder(tp.Tracer(TracerName), WithContent(false), WithRedact(redactKey))
	ctx := context.Background()
	r.runStarted(ctx, RunInfo{ID: "run1", Name: "r"})
	r.trialStarted(ctx, "run1", "t0", spec.Record{ID: "a", Input: spec.Input{Text: "x"}}, 0, 0)
	r.trialFinished("t0", &engine.Outcome{Status: engine.TrialErrored, ErrorKind: "agent",
		Error: `POST http://127.0.0.1:9/run?key=sk-secret-123: connection refused`}, "")
	r.runFinished("run1", engine.StatusFailed, nil, "setup: curl -H 'Authorization: Bearer sk-secret-123' failed")
	var n int
	for _, s := range sr.Ended() {
		if d := s.Status().Description; d != "" {
			n++
			if strings.Contains(d, "sk-secret-123") || !strings.Contains(d, "[redacted]") {
				t.Errorf("span %q status %q: want the secret redacted", s.Name(), d)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d spans with an error status, want the trial's and the run's", n)
	}
}

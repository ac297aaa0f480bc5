package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"evals.si/engine"
	"evals.si/spec"
)

// Message content on spans is off by default: records and outputs may hold
// what users would not send to a trace backend. The GenAI semantic
// conventions' opt-in turns it on.
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// Content attributes of the GenAI semantic conventions, set on a trial's
// span when content is captured: the record's input and the trial's output,
// as JSON arrays of {role, parts: [{type: "text", content}]} messages.
const (
	AttrInputMessages  = "gen_ai.input.messages"
	AttrOutputMessages = "gen_ai.output.messages"
)

// CaptureContent reports whether the environment opts in to message content
// on spans.
func CaptureContent(getenv func(string) string) bool {
	return strings.EqualFold(strings.TrimSpace(getenv(CaptureContentEnv)), "true")
}

// Option configures the span recorder (Start).
type Option func(*recorder)

// WithContent sets whether trial spans carry the record's input and the
// trial's output (gen_ai.input.messages, gen_ai.output.messages). Content
// is put on spans only with a redactor as well (WithRedact).
func WithContent(on bool) Option { return func(r *recorder) { r.content.on = on } }

// WithRedact gives the redaction the store applies (store.Redactor's
// RedactJSON): content on spans leaves the host for a trace backend, so it
// must not carry what the store would not keep (env_from values, provider
// keys an output may echo).
func WithRedact(redact func(json []byte) []byte) Option {
	return func(r *recorder) { r.content.redact = redact }
}

// capture is a recorder's content setting.
type capture struct {
	on     bool
	redact func([]byte) []byte
}

// enabled reports whether content goes on spans: asked for, and redactable.
func (c capture) enabled() bool { return c.on && c.redact != nil }

// semconv message and part, as the conventions' JSON schema writes them.
type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	FinishReason string `json:"finish_reason,omitempty"`
}

type part struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// start returns the start options of a trial span carrying the
// record's input. With content, a trial is the root of a trace of its own,
// linked to the run's trace: its trace then reads like a request to a
// service (one input, one answer), which a traces dataset turns into one
// record.
func (c capture) start(run context.Context, rec spec.Record) []trace.SpanStartOption {
	var msgs []message
	if rec.Input.Messages != nil {
		for _, m := range rec.Input.Messages {
			msgs = append(msgs, message{Role: m.Role, Parts: []part{{Type: "text", Content: m.Content}}})
		}
	} else {
		msgs = []message{{Role: "user", Parts: []part{{Type: "text", Content: rec.Input.Text}}}}
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(attribute.String(AttrInputMessages, c.encode(msgs)))}
	if l := trace.LinkFromContext(run); l.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(l))
	}
	return opts
}

// end returns the trial's output as gen_ai.output.messages; none for
// a trial that errored without output.
func (c capture) end(o *engine.Outcome) []attribute.KeyValue {
	if o.Output == "" && o.Status == engine.TrialErrored {
		return nil
	}
	finish := "stop"
	if o.Status == engine.TrialErrored {
		finish = "error"
	}
	msgs := []message{{Role: "assistant", Parts: []part{{Type: "text", Content: o.Output}}, FinishReason: finish}}
	return []attribute.KeyValue{attribute.String(AttrOutputMessages, c.encode(msgs))}
}

func (c capture) encode(msgs []message) string {
	b, _ := json.Marshal(msgs)
	return string(c.redact(b))
}

// checkCapture refuses an opt-in the host cannot honour safely.
func (r *recorder) checkCapture() error {
	if r.content.on && r.content.redact == nil {
		return fmt.Errorf("%s=true, but this host does not redact secrets from span content (telemetry.WithRedact); unset it", CaptureContentEnv)
	}
	return nil
}

// setError marks span failed with msg, redacted as the store redacts what
// it keeps: error text quotes commands, URLs and outputs, which can hold a
// secret that env_from mapped, and a span leaves the host for a trace
// backend whether or not content capture is on.
func (r *recorder) setError(span trace.Span, msg string) {
	span.SetStatus(codes.Error, r.content.redactText(msg))
}

// redactText redacts one string through the JSON redactor (as a JSON
// string, so the redactor sees what it sees in stored events).
func (c capture) redactText(s string) string {
	if c.redact == nil {
		return s
	}
	b, err := json.Marshal(s)
	if err != nil {
		return s
	}
	var out string
	if err := json.Unmarshal(c.redact(b), &out); err != nil {
		return "(error text withheld: it could not be redacted)"
	}
	return out
}

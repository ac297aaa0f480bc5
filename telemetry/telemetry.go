// Package telemetry exports runs as OpenTelemetry traces: a span per run,
// a child span per trial, and under each trial a span per model call, tool
// call and checker run. Spans are built from the trajectory events as the
// engine records them (an event's time is when its step ended, DurationMS
// how long it took), so no agent, connector or sandbox code knows about
// OTel; the trace is one more reader of the event stream.
//
// Export is configured by the standard OTLP variables and is off unless an
// endpoint is set: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL
// http/protobuf (default), http/json or grpc, and the exporters' other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression, TLS; for
// http/json, which the SDK does not provide, jsonexport.go reads headers,
// timeout, compression and the CA certificate).
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the resource;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn export off.
//
// Span names and attributes follow the GenAI semantic conventions where
// they apply (gen_ai.operation.name, gen_ai.request.model,
// gen_ai.usage.input_tokens, gen_ai.tool.name); evals.si's own are under
// evalsi.* (evalsi.run_id, evalsi.record_id, evalsi.trial).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"evals.si/engine"
)

// TracerName is the instrumentation scope of evals.si's spans.
const TracerName = "evals.si/telemetry"

// Enabled reports whether the environment asks for trace export: an OTLP
// endpoint is set and the SDK is not disabled.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// NewProvider builds a tracer provider that batches spans to the OTLP
// exporter the environment configures. Shut it down to flush.
func NewProvider(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "http/json":
		exp, err = newJSONExporter(getenv)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%w: %s %q is not supported: use http/protobuf (the default), http/json or grpc", ErrConfig, protoVar(getenv), proto)
	}
	if errors.Is(err, ErrConfig) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter (%s): %w", protoName(proto), err)
	}
	// Later options win: the environment may rename the service.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "evalsi")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("describing the OTel resource (check OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// protoVar names the variable the protocol came from.
func protoVar(getenv func(string) string) string {
	if getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") != "" {
		return "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	}
	return "OTEL_EXPORTER_OTLP_PROTOCOL"
}

func protoName(p string) string {
	if p == "" {
		return "http/protobuf"
	}
	return p
}

// Tracing exports a run's spans over OTLP. A nil *Tracing (the
// environment asks for no export) does nothing.
type Tracing struct {
	r        *recorder
	shutdown func(context.Context) error
}

// Start returns nil when the environment (os.Getenv) asks for no trace
// export; otherwise a Tracing exporting to the OTLP endpoint it names.
// Call Shutdown when done. opts add to what the environment asks for: a
// host that captures content (CaptureContentEnv) passes WithRedact.
func Start(ctx context.Context, opts ...Option) (*Tracing, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	tp, err := NewProvider(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	shutdown := func(ctx context.Context) error {
		// An unreachable collector must not hold the command up for long.
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing OTel spans: %w", err)
		}
		return nil
	}
	r := newRecorder(tp.Tracer(TracerName), append([]Option{WithContent(CaptureContent(os.Getenv))}, opts...)...)
	if err := r.checkCapture(); err != nil {
		_ = tp.Shutdown(ctx)
		return nil, err
	}
	return &Tracing{r: r, shutdown: shutdown}, nil
}

// RunStarted opens the run's span.
func (t *Tracing) RunStarted(ctx context.Context, ri RunInfo) {
	if t != nil {
		t.r.runStarted(ctx, ri)
	}
}

// RunFinished closes the run's span with its summary.
func (t *Tracing) RunFinished(runID, status string, sum *engine.Summary, errMsg string) {
	if t != nil {
		t.r.runFinished(runID, status, sum, errMsg)
	}
}

// Queue returns q, also emitting the spans of the attempts leased
// through it.
func (t *Tracing) Queue(q engine.Queue) engine.Queue {
	if t == nil {
		return q
	}
	return &tracedQueue{next: q, r: t.r}
}

// Shutdown ends open spans and flushes the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.r.closeOpen()
	return t.shutdown(ctx)
}

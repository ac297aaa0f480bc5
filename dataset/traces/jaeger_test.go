package traces_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"evals.si/dataset/traces"
	"evals.si/internal/testenv/jaegertest"
	"evals.si/spec"
)

// exportSpans sends spans of service over OTLP/HTTP to endpoint with the
// OTel SDK, as a production service would; each call of emit makes a trace.
func exportSpans(t *testing.T, endpoint, service string, emit func(trace.Tracer)) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	emit(tp.Tracer("shop-test"))
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("exporting spans to Jaeger: %v", err)
	}
}

// TestJaeger exports traces of "shop" (and one of another service) to a
// real Jaeger, then reads them through its query API: the filter selects
// exactly the traces it should, newest first, each record built from the
// trace's root span.
func TestJaeger(t *testing.T) {
	otlp, query := jaegertest.Start(t)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	ids := map[string]string{}
	root := func(tr trace.Tracer, key, name string, at time.Duration, attrs ...attribute.KeyValue) trace.Span {
		_, s := tr.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithTimestamp(base.Add(at)), trace.WithAttributes(attrs...))
		ids[key] = s.SpanContext().TraceID().String()
		return s
	}
	msgs := func(text string) attribute.KeyValue {
		return attribute.String("gen_ai.input.messages", `[{"role":"user","parts":[{"type":"text","content":"`+text+`"}]}]`)
	}
	exportSpans(t, otlp, "shop", func(tr trace.Tracer) {
		a := root(tr, "a", "POST /chat", time.Minute, attribute.String("plan", "pro"), msgs("hello"))
		a.End(trace.WithTimestamp(base.Add(time.Minute + 300*time.Millisecond)))

		b := root(tr, "b", "POST /chat", 2*time.Minute, attribute.String("plan", "free"), msgs("refund"))
		b.SetStatus(codes.Error, "upstream timeout")
		b.End(trace.WithTimestamp(base.Add(2*time.Minute + time.Second)))

		c := root(tr, "c", "GET /health", 3*time.Minute, attribute.String("plan", "pro"))
		c.End(trace.WithTimestamp(base.Add(3*time.Minute + time.Millisecond)))

		d := root(tr, "d", "POST /checkout", 4*time.Minute, attribute.String("plan", "pro"),
			attribute.String("input.value", "buy the hat"),
			attribute.String("gen_ai.output.messages", `[{"role":"assistant","parts":[{"type":"text","content":"Bought."}],"finish_reason":"stop"}]`))
		ctx := trace.ContextWithSpan(context.Background(), d)
		_, child := tr.Start(ctx, "chat model", trace.WithTimestamp(base.Add(4*time.Minute+10*time.Millisecond)),
			trace.WithAttributes(attribute.String("plan", "pro"), msgs("inner")))
		child.End(trace.WithTimestamp(base.Add(4*time.Minute + 200*time.Millisecond)))
		d.End(trace.WithTimestamp(base.Add(4*time.Minute + 500*time.Millisecond)))
	})
	exportSpans(t, otlp, "billing", func(tr trace.Tracer) {
		s := root(tr, "other", "POST /charge", 5*time.Minute, attribute.String("plan", "pro"), msgs("charge"))
		s.End(trace.WithTimestamp(base.Add(5 * time.Minute)))
	})

	src := traces.NewSource(traces.Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	all := spec.TracesDataset{Service: "shop", URL: query}
	waitForTraces(t, src, all, 4)

	for _, tc := range []struct {
		name   string
		d      spec.TracesDataset
		want   []string
		noIn   int
		errors int
	}{
		{"every trace with input", all, []string{"d", "b", "a"}, 1, 0},
		{"filter", spec.TracesDataset{Service: "shop", URL: query,
			Filter: `span.attributes["plan"] == "pro" && span.name.startsWith("POST ")`}, []string{"d", "a"}, 0, 0},
		{"errors only", spec.TracesDataset{Service: "shop", URL: query, Policy: &spec.TracePolicy{ErrorsOnly: true}}, []string{"b"}, 0, 0},
		{"duration and kind", spec.TracesDataset{Service: "shop", URL: query,
			Filter: `span.duration_ms >= 500.0 && span.kind == "server" && span.resource["service.name"] == "shop"`}, []string{"d", "b"}, 0, 0},
		{"another service", spec.TracesDataset{Service: "billing", URL: query}, []string{"other"}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, st, err := src.Read(ctx, tc.d, "")
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, k := range tc.want {
				want = append(want, ids[k])
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("records %v, want %v (%v)", got, want, tc.want)
			}
			if st.NoInput != tc.noIn || st.FilterErrors != tc.errors {
				t.Errorf("stats %+v", st)
			}
		})
	}

	// d's record: input.value, the production answer, its root span.
	recs, _, err := src.Read(ctx, spec.TracesDataset{Service: "shop", URL: query, Policy: &spec.TracePolicy{Limit: 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != ids["d"] || recs[0].Input.Text != "buy the hat" || string(recs[0].Expected) != `"Bought."` {
		t.Fatalf("limit 1: %+v", recs)
	}

	// A window before the traces: Jaeger answers 404 "No traces found",
	// which is an empty dataset, not an error.
	early := traces.NewSource(traces.Options{Now: func() time.Time { return base.Add(-time.Hour) }, Logger: slog.New(slog.DiscardHandler)})
	recs, _, err = early.Read(ctx, spec.TracesDataset{Service: "shop", URL: query, Lookback: spec.Duration(time.Minute)}, "")
	if err != nil || len(recs) != 0 {
		t.Errorf("empty window: %d records, %v", len(recs), err)
	}
}

// waitForTraces waits until Jaeger has stored n traces of the dataset's
// service: its storage exporter queues what the receiver accepted.
func waitForTraces(t *testing.T, src *traces.Source, d spec.TracesDataset, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		_, st, err := src.Read(ctx, d, "")
		if err == nil && st.Traces >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Jaeger did not store %d traces of %s within a minute (last: %+v, %v)", n, d.Service, st, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

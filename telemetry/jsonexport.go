package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// jsonExporter posts spans as OTLP/HTTP JSON (protocol http/json), which
// the SDK's otlptracehttp does not speak: it sends protobuf only. The
// request is the official ExportTraceServiceRequest, marshalled by
// protojson and then brought to the OTLP JSON encoding's rules: trace and
// span ids as hex strings (protojson writes bytes as base64) and enums as
// numbers.
type jsonExporter struct {
	url string
	// shown is url for messages, its password masked (url.Redacted).
	shown   string
	headers http.Header
	gzip    bool
	client  *http.Client
}

// newJSONExporter reads the standard OTLP variables the protobuf exporter
// reads: the endpoint (a signal endpoint is used as is; the general one
// gets /v1/traces), headers, timeout, compression and a CA certificate.
func newJSONExporter(getenv func(string) string) (*jsonExporter, error) {
	env := func(name string) string {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			base = "http://localhost:4318"
		}
		endpoint = strings.TrimRight(base, "/") + "/v1/traces"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: OTLP endpoint %q is not an http(s) URL: set OTEL_EXPORTER_OTLP_ENDPOINT to e.g. http://127.0.0.1:4318", ErrConfig, endpoint)
	}
	e := &jsonExporter{url: endpoint, shown: u.Redacted(), headers: http.Header{}}
	if h := env("HEADERS"); h != "" {
		for i, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				// The entry is not echoed: headers carry credentials
				// (a mistyped "Authorization: Bearer sk-…" would land
				// in the terminal and CI logs).
				return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_HEADERS entry %d (of %d bytes) is not key=value: write entries as key=value, separated by commas", ErrConfig, i+1, len(kv))
			}
			if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
				v = dv
			}
			e.headers.Set(strings.TrimSpace(k), v)
		}
	}
	timeout := 10 * time.Second
	if t := env("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_TIMEOUT %q is not a positive number of milliseconds", ErrConfig, t)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	switch c := env("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		e.gzip = true
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_COMPRESSION %q is not supported: use gzip or none", ErrConfig, c)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ca := env("CERTIFICATE"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: reading OTEL_EXPORTER_OTLP_CERTIFICATE: %v", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_CERTIFICATE %s holds no PEM certificate", ErrConfig, ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	e.client = &http.Client{Timeout: timeout, Transport: tr}
	return e, nil
}

// ExportSpans posts one request; a busy collector (429, 502, 503, 504) is
// tried twice more, as the OTLP spec asks of retryable responses.
func (e *jsonExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := marshalOTLPJSON(spans)
	if err != nil {
		return fmt.Errorf("encoding spans as OTLP JSON: %w", err)
	}
	if e.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body)
		if err := zw.Close(); err != nil {
			return fmt.Errorf("compressing spans: %w", err)
		}
		body = b.Bytes()
	}
	for attempt := 0; ; attempt++ {
		retry, err := e.post(ctx, body)
		if err == nil || !retry || attempt == 2 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
}

func (e *jsonExporter) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("OTLP/JSON export to %s: %w", e.shown, err)
	}
	for k, v := range e.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("OTLP/JSON export to %s: %w", e.shown, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		retry = true
	}
	return retry, fmt.Errorf("OTLP/JSON export to %s: %s: %s", e.shown, resp.Status, strings.TrimSpace(string(msg)))
}

func (e *jsonExporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// marshalOTLPJSON encodes spans as an ExportTraceServiceRequest in OTLP
// JSON.
func marshalOTLPJSON(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(toOTLP(spans))
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if err := hexIDs(doc); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// hexIDs rewrites the id fields protojson wrote as base64 into the hex
// strings the OTLP JSON encoding requires.
func hexIDs(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch k {
			case "traceId", "spanId", "parentSpanId":
				s, ok := x.(string)
				if !ok {
					continue
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return fmt.Errorf("%s %q: %w", k, s, err)
				}
				v[k] = hex.EncodeToString(raw)
			default:
				if err := hexIDs(x); err != nil {
					return err
				}
			}
		}
	case []any:
		for _, x := range v {
			if err := hexIDs(x); err != nil {
				return err
			}
		}
	}
	return nil
}

// toOTLP groups spans by resource and instrumentation scope, as OTLP
// requests do.
func toOTLP(spans []sdktrace.ReadOnlySpan) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	type scopeKey struct{ res, name, version string }
	resources := map[string]*tracepb.ResourceSpans{}
	scopes := map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		resKey := ""
		var res *resourcepb.Resource
		if r := s.Resource(); r != nil {
			resKey = r.Encoded(attribute.DefaultEncoder())
			res = &resourcepb.Resource{Attributes: keyValues(r.Attributes())}
		}
		rs := resources[resKey]
		if rs == nil {
			rs = &tracepb.ResourceSpans{Resource: res}
			if r := s.Resource(); r != nil {
				rs.SchemaUrl = r.SchemaURL()
			}
			resources[resKey] = rs
			req.ResourceSpans = append(req.ResourceSpans, rs)
		}
		sc := s.InstrumentationScope()
		k := scopeKey{resKey, sc.Name, sc.Version}
		ss := scopes[k]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version}, SchemaUrl: sc.SchemaURL}
			scopes[k] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	return req
}

func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Name:                   s.Name(),
		Kind:                   spanKind(s.SpanKind()),
		StartTimeUnixNano:      uint64(s.StartTime().UnixNano()),
		EndTimeUnixNano:        uint64(s.EndTime().UnixNano()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: uint32(s.DroppedAttributes()),
		DroppedEventsCount:     uint32(s.DroppedEvents()),
		DroppedLinksCount:      uint32(s.DroppedLinks()),
		Flags:                  uint32(sc.TraceFlags()) | 0x100, // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	}
	if par := s.Parent(); par.IsValid() {
		psid := par.SpanID()
		p.ParentSpanId = psid[:]
		if par.IsRemote() {
			p.Flags |= 0x200
		}
	}
	st := s.Status()
	switch st.Code {
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano: uint64(ev.Time.UnixNano()), Name: ev.Name, Attributes: keyValues(ev.Attributes),
			DroppedAttributesCount: uint32(ev.DroppedAttributeCount),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{
			TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: uint32(l.DroppedAttributeCount),
			Flags: uint32(l.SpanContext.TraceFlags()) | 0x100,
		})
	}
	return p
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), func(b bool) *commonpb.AnyValue { return anyValue(attribute.BoolValue(b)) })
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), func(i int64) *commonpb.AnyValue { return anyValue(attribute.Int64Value(i)) })
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), func(f float64) *commonpb.AnyValue { return anyValue(attribute.Float64Value(f)) })
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), func(s string) *commonpb.AnyValue { return anyValue(attribute.StringValue(s)) })
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
}

func array[T any](xs []T, f func(T) *commonpb.AnyValue) *commonpb.AnyValue {
	vals := make([]*commonpb.AnyValue, 0, len(xs))
	for _, x := range xs {
		vals = append(vals, f(x))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
}

package telemetry_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/telemetry"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// receiver is an OTLP trace receiver on the official collector types: over
// HTTP it decodes the ExportTraceServiceRequest bodies posted to
// /v1/traces, protobuf or JSON (otlpJSON); over gRPC (serveGRPC) it is the
// TraceService.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	// contentTypes are the HTTP requests' content types.
	contentTypes []string
}

func (rc *receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		rc.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
}

// Export is the gRPC TraceService's method.
func (rc *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	rc.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct != "application/x-protobuf" && ct != "application/json" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if ct == "application/json" {
		err = otlpJSON(b, &req)
	} else {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.contentTypes = append(rc.contentTypes, ct)
	rc.mu.Unlock()
	rc.add(&req)
	if ct == "application/json" {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
		return
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = v.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		default:
			m[kv.Key] = kv.Value.String()
		}
	}
	return m
}

// startReceiver serves a receiver on loopback and points the OTLP
// environment variables at it.
func startReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "evalsi-test")
	return rc
}

func runSpec(t *testing.T, path string) string {
	t.Helper()
	app, err := embedded.Open(context.Background(), embedded.Options{StorePath: filepath.Join(t.TempDir(), "evalsi.db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	f, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Spec.Validate(); err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(context.Background(), f, embedded.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != "completed" || sum.Errored != 0 {
		t.Fatalf("run %s: status %s, %d errored", path, sum.Status, sum.Errored)
	}
	return sum.RunID
}

type tree struct {
	byID     map[string]*tracepb.Span
	children map[string][]*tracepb.Span
	roots    []*tracepb.Span
}

func buildTree(t *testing.T, spans []*tracepb.Span) tree {
	tr := tree{byID: map[string]*tracepb.Span{}, children: map[string][]*tracepb.Span{}}
	for _, s := range spans {
		tr.byID[hex.EncodeToString(s.SpanId)] = s
	}
	for _, s := range spans {
		if len(s.ParentSpanId) == 0 {
			tr.roots = append(tr.roots, s)
			continue
		}
		p := hex.EncodeToString(s.ParentSpanId)
		if tr.byID[p] == nil {
			t.Errorf("span %q has parent %s that was not exported", s.Name, p)
		}
		tr.children[p] = append(tr.children[p], s)
	}
	return tr
}

// TestAgentRunSpans runs fix-calc-offline (a scripted agent in a bwrap
// sandbox) with the OTLP variables pointing at a receiver on loopback, and
// checks the span tree run → trial → model calls, tool calls, checker and
// their attributes.
func TestAgentRunSpans(t *testing.T) {
	for _, tool := range []string{"bwrap", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, tool+" is not installed; fix-calc-offline needs it")
		}
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "the fix-calc checker runs pytest")
	}
	rc := startReceiver(t)
	runID := runSpec(t, "../examples/agents/fix-calc-offline.yaml")

	rc.mu.Lock()
	defer rc.mu.Unlock()
	if got := attrs(rc.resource)["service.name"]; got != "evalsi-test" {
		t.Errorf("resource service.name = %v, want evalsi-test from OTEL_SERVICE_NAME", got)
	}
	tr := buildTree(t, rc.spans)
	if len(tr.roots) != 1 {
		t.Fatalf("%d root spans, want 1 run span; spans: %d", len(tr.roots), len(rc.spans))
	}
	run := tr.roots[0]
	if a := attrs(run.Attributes); run.Name != "evalsi.run fix-calc-offline" || a[telemetry.AttrRunID] != runID || a["evalsi.status"] != "completed" ||
		run.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("run span %q attrs %v", run.Name, a)
	}
	for _, s := range rc.spans {
		if string(s.TraceId) != string(run.TraceId) {
			t.Errorf("span %q is in another trace", s.Name)
		}
	}
	trials := tr.children[hex.EncodeToString(run.SpanId)]
	if len(trials) != 1 {
		t.Fatalf("run has %d child spans, want 1 trial", len(trials))
	}
	trial := trials[0]
	ta := attrs(trial.Attributes)
	if trial.Name != "invoke_agent evalsi.builtin" || ta[telemetry.AttrOperation] != "invoke_agent" || ta[telemetry.AttrAgentName] != "evalsi.builtin" ||
		ta[telemetry.AttrProvider] != "scripted" || ta[telemetry.AttrModel] != "scripted-agent" ||
		ta[telemetry.AttrRunID] != runID || ta[telemetry.AttrRecordID] != "fix-calc" ||
		ta[telemetry.AttrTrial] != int64(0) || ta["evalsi.passed"] != true || ta["evalsi.score.task-success"] != 1.0 {
		t.Errorf("trial span %q attrs %v", trial.Name, ta)
	}
	if trial.StartTimeUnixNano < run.StartTimeUnixNano || trial.EndTimeUnixNano > run.EndTimeUnixNano {
		t.Errorf("trial span [%d, %d] is not inside the run span [%d, %d]", trial.StartTimeUnixNano, trial.EndTimeUnixNano, run.StartTimeUnixNano, run.EndTimeUnixNano)
	}

	var models, checkers int
	var tools []string
	var inTokens int64
	names := map[string]int{}
	evaluators := map[string]*tracepb.Span{}
	for _, s := range tr.children[hex.EncodeToString(trial.SpanId)] {
		names[s.Name]++
		if a := attrs(s.Attributes); a[telemetry.AttrEvaluator] != nil {
			evaluators[a[telemetry.AttrEvaluator].(string)] = s
		}
		a := attrs(s.Attributes)
		if a[telemetry.AttrRunID] != runID || a[telemetry.AttrRecordID] != "fix-calc" || a[telemetry.AttrTrial] != int64(0) {
			t.Errorf("span %q lacks the trial's identity: %v", s.Name, a)
		}
		if s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("span %q ends before it starts", s.Name)
		}
		switch a[telemetry.AttrOperation] {
		case "chat":
			models++
			in, _ := a[telemetry.AttrInputTokens].(int64)
			out, _ := a[telemetry.AttrOutputTokens].(int64)
			if in <= 0 || out <= 0 || a[telemetry.AttrModel] != "scripted-agent" || s.Name != "chat scripted-agent" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT ||
				a[telemetry.AttrProvider] != "scripted" || a[telemetry.AttrResponseModel] != "scripted-agent" ||
				!strings.HasPrefix(fmt.Sprint(a[telemetry.AttrResponseID]), "scripted-fix-calc-") {
				t.Errorf("model span %q kind %v attrs %v", s.Name, s.Kind, a)
			}
			inTokens += in
		case "execute_tool":
			name, _ := a[telemetry.AttrToolName].(string)
			tools = append(tools, name)
			if s.Name != "execute_tool "+name || a[telemetry.AttrToolCallID] == "" || a[telemetry.AttrToolType] != "function" {
				t.Errorf("tool span %q attrs %v", s.Name, a)
			}
		default:
			if s.Name == "evalsi.checker" {
				checkers++
				if a["evalsi.passed"] != true {
					t.Errorf("checker span attrs %v", a)
				}
			}
		}
	}
	if models != 4 {
		t.Errorf("%d model call spans, want the script's 4", models)
	}
	if ti, _ := ta[telemetry.AttrInputTokens].(int64); ti != inTokens {
		t.Errorf("trial input tokens %d, sum of its model calls %d", ti, inTokens)
	}
	if len(tools) != 3 || tools[0] != "bash" || tools[1] != "write_file" || tools[2] != "bash" {
		t.Errorf("tool spans %v, want [bash write_file bash]", tools)
	}
	if checkers != 1 {
		t.Errorf("%d checker spans, want 1", checkers)
	}
	// The phases no event records: setup, the sandbox, the checker's
	// preflight and each evaluator with its score.
	for _, n := range []string{"evalsi.setup", "evalsi.sandbox.create", "evalsi.checker.preflight"} {
		if names[n] != 1 {
			t.Errorf("%d %q spans, want 1; trial's children: %v", names[n], n, names)
		}
	}
	for _, ev := range []string{"task-success", "code-quality", "policy-violations", "agent-efficiency"} {
		s := evaluators[ev]
		if s == nil {
			t.Errorf("no span for evaluator %s; trial's children: %v", ev, names)
			continue
		}
		a := attrs(s.Attributes)
		if s.Name != "evalsi.evaluator "+ev || a[telemetry.AttrEvalName] != ev || a[telemetry.AttrEvalScore] == nil || s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("evaluator span %q attrs %v status %v", s.Name, a, s.Status)
		}
	}
	// code-quality's judge call is a chat span under its evaluator's span.
	if cq := evaluators["code-quality"]; cq != nil {
		if a := attrs(cq.Attributes); a["evalsi.score.code-quality"] == nil || a["evalsi.score.mergeable"] == nil {
			t.Errorf("code-quality span attrs %v", a)
		}
		judge := tr.children[hex.EncodeToString(cq.SpanId)]
		if len(judge) != 1 {
			t.Fatalf("code-quality span has %d children, want its judge's call", len(judge))
		}
		a := attrs(judge[0].Attributes)
		if judge[0].Name != "chat scripted-judge" || a[telemetry.AttrOperation] != "chat" || a[telemetry.AttrModelRole] != "judge" ||
			a[telemetry.AttrProvider] != "scripted" || a[telemetry.AttrResponseID] == nil || a[telemetry.AttrInputTokens].(int64) <= 0 {
			t.Errorf("judge span %q attrs %v", judge[0].Name, a)
		}
	}
}

func TestEnabled(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, c := range cases {
		if got := telemetry.Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("Enabled(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

// TestTelemetryProtocolConfig: an unsupported protocol is a configuration
// error (ErrConfig, exit 2 in the CLI) naming the variable, the value and
// the supported ones.
func TestTelemetryProtocolConfig(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string // "" for no error
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/xml"},
			`telemetry configuration: OTEL_EXPORTER_OTLP_PROTOCOL "http/xml" is not supported: use http/protobuf (the default), http/json or grpc`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			`telemetry configuration: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "thrift" is not supported: use http/protobuf (the default), http/json or grpc`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"},
			`telemetry configuration: OTLP endpoint "127.0.0.1:4318/v1/traces" is not an http(s) URL: set OTEL_EXPORTER_OTLP_ENDPOINT to e.g. http://127.0.0.1:4318`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
			`telemetry configuration: OTEL_EXPORTER_OTLP_COMPRESSION "zstd" is not supported: use gzip or none`},
	}
	for _, c := range cases {
		tp, err := telemetry.NewProvider(context.Background(), func(k string) string { return c.env[k] })
		if c.want == "" {
			if err != nil {
				t.Errorf("%v: %v", c.env, err)
			} else {
				_ = tp.Shutdown(context.Background())
			}
			continue
		}
		if err == nil || err.Error() != c.want || !errors.Is(err, telemetry.ErrConfig) {
			t.Errorf("%v: error %v, want %q wrapping ErrConfig", c.env, err, c.want)
		}
	}
}

package telemetry_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// receiver is an OTLP/HTTP trace receiver: it decodes the protobuf
// ExportTraceServiceRequest bodies the exporter posts to /v1/traces.
type receiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
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
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.ResourceSpans {
		rc.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			rc.spans = append(rc.spans, ss.Spans...)
		}
	}
	rc.mu.Unlock()
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
	if a := attrs(run.Attributes); run.Name != "evalsi.run fix-calc-offline" || a[telemetry.AttrRunID] != runID || a["evalsi.status"] != "completed" {
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
	if trial.Name != "evalsi.trial fix-calc" || ta[telemetry.AttrRunID] != runID || ta[telemetry.AttrRecordID] != "fix-calc" ||
		ta[telemetry.AttrTrial] != int64(0) || ta["evalsi.passed"] != true || ta["evalsi.score.task-success"] != 1.0 {
		t.Errorf("trial span %q attrs %v", trial.Name, ta)
	}
	if trial.StartTimeUnixNano < run.StartTimeUnixNano || trial.EndTimeUnixNano > run.EndTimeUnixNano {
		t.Errorf("trial span [%d, %d] is not inside the run span [%d, %d]", trial.StartTimeUnixNano, trial.EndTimeUnixNano, run.StartTimeUnixNano, run.EndTimeUnixNano)
	}

	var models, checkers int
	var tools []string
	var inTokens int64
	for _, s := range tr.children[hex.EncodeToString(trial.SpanId)] {
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
			if in <= 0 || out <= 0 || a[telemetry.AttrModel] != "scripted-agent" || s.Name != "chat scripted-agent" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("model span %q kind %v attrs %v", s.Name, s.Kind, a)
			}
			inTokens += in
		case "execute_tool":
			name, _ := a[telemetry.AttrToolName].(string)
			tools = append(tools, name)
			if s.Name != "execute_tool "+name || a[telemetry.AttrToolCallID] == "" {
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
}

// TestPlainRunSpans needs no sandbox: a plain model run (capitals-offline)
// makes a run span, a trial span per record and a model call span each.
func TestPlainRunSpans(t *testing.T) {
	rc := startReceiver(t)
	runID := runSpec(t, "../examples/capitals-offline.yaml")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tr := buildTree(t, rc.spans)
	if len(tr.roots) != 1 || attrs(tr.roots[0].Attributes)[telemetry.AttrRunID] != runID {
		t.Fatalf("roots %v", tr.roots)
	}
	trials := tr.children[hex.EncodeToString(tr.roots[0].SpanId)]
	if len(trials) < 2 {
		t.Fatalf("%d trial spans", len(trials))
	}
	records := map[any]bool{}
	for _, trial := range trials {
		records[attrs(trial.Attributes)[telemetry.AttrRecordID]] = true
		kids := tr.children[hex.EncodeToString(trial.SpanId)]
		if len(kids) != 1 || attrs(kids[0].Attributes)[telemetry.AttrOperation] != "chat" {
			t.Errorf("trial %q children %v", trial.Name, kids)
		}
	}
	if len(records) != len(trials) {
		t.Errorf("trial spans repeat records: %v", records)
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
	_, err := telemetry.NewProvider(context.Background(), func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_PROTOCOL" {
			return "http/json"
		}
		return ""
	})
	if err == nil {
		t.Error("http/json protocol: no error")
	}
}

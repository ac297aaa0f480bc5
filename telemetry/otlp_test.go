package telemetry_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/telemetry"
)

var hexID = regexp.MustCompile(`^[0-9a-f]+$`)

// otlpJSON decodes an OTLP/JSON body into the official request type. The
// OTLP JSON encoding differs from protojson's in its ids (hex, not
// base64), so, as a collector does, the ids are checked to be hex of the
// right length and handed to protojson as the bytes they are.
func otlpJSON(b []byte, req *coltracepb.ExportTraceServiceRequest) error {
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	var fix func(v any) error
	fix = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				n := map[string]int{"traceId": 32, "spanId": 16, "parentSpanId": 16}[k]
				if n == 0 {
					if err := fix(x); err != nil {
						return err
					}
					continue
				}
				s, _ := x.(string)
				if len(s) != n || !hexID.MatchString(s) {
					return fmt.Errorf("%s %q is not %d lowercase hex digits", k, s, n)
				}
				raw, _ := hex.DecodeString(s)
				v[k] = base64.StdEncoding.EncodeToString(raw)
			}
		case []any:
			for _, x := range v {
				if err := fix(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := fix(doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, req)
}

// startProtocol serves a receiver for protocol on loopback and points the
// OTLP variables at it.
func startProtocol(t *testing.T, protocol string) *receiver {
	rc := &receiver{}
	switch protocol {
	case "grpc":
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, rc)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
		t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	default:
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_SERVICE_NAME", "evalsi-test")
	return rc
}

// runText runs a spec written to a file, errored trials allowed.
func runText(t *testing.T, text string) *engine.Summary {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
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
	return sum
}

const judgedSpec = `name: capitals-judged
dataset:
  records:
    - {id: france, input: "What is the capital of France?", expected: Paris}
    - {id: japan, input: "What is the capital of Japan?", expected: Tokyo}
target:
  connector: scripted
  model: scripted-capitals
  script:
    records:
      france: [{content: "Paris"}]
      japan: [{content: "Kyoto"}]
judge:
  connector: scripted
  model: scripted-judge
  script:
    default: [{content: '{"reasoning": "fine", "score": 0.75}'}]
evaluators: [exact-match, llm-judge]
`

// TestTraceProtocols runs a plain eval with a judge under each OTLP
// protocol against a receiver on loopback and checks what a trace backend
// shows: the run, an invoke_agent span per trial, its model call with the
// GenAI attributes, and each evaluator with its score, the judge's call
// under llm-judge's.
func TestTraceProtocols(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "http/json", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rc := startProtocol(t, protocol)
			sum := runText(t, judgedSpec)
			if sum.Status != engine.StatusCompleted || sum.Errored != 0 {
				t.Fatalf("run: status %s, %d errored", sum.Status, sum.Errored)
			}
			rc.mu.Lock()
			defer rc.mu.Unlock()
			switch protocol {
			case "http/json":
				if len(rc.contentTypes) == 0 || rc.contentTypes[0] != "application/json" {
					t.Errorf("content types %v, want application/json", rc.contentTypes)
				}
			case "http/protobuf":
				if len(rc.contentTypes) == 0 || rc.contentTypes[0] != "application/x-protobuf" {
					t.Errorf("content types %v, want application/x-protobuf", rc.contentTypes)
				}
			}
			if got := attrs(rc.resource)["service.name"]; got != "evalsi-test" {
				t.Errorf("resource service.name = %v", got)
			}
			tr := buildTree(t, rc.spans)
			if len(tr.roots) != 1 {
				t.Fatalf("%d roots, want the run's", len(tr.roots))
			}
			run := tr.roots[0]
			if a := attrs(run.Attributes); run.Name != "evalsi.run capitals-judged" || a[telemetry.AttrRunID] != sum.RunID ||
				a["evalsi.errored"] != int64(0) || run.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("run span %q attrs %v status %v", run.Name, a, run.Status)
			}
			trials := tr.children[hex.EncodeToString(run.SpanId)]
			if len(trials) != 2 {
				t.Fatalf("%d trial spans, want 2", len(trials))
			}
			for _, trial := range trials {
				ta := attrs(trial.Attributes)
				rec, _ := ta[telemetry.AttrRecordID].(string)
				if trial.Name != "invoke_agent scripted-capitals" || ta[telemetry.AttrOperation] != "invoke_agent" ||
					ta[telemetry.AttrAgentName] != "scripted-capitals" || trial.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
					t.Errorf("trial span %q kind %v attrs %v", trial.Name, trial.Kind, ta)
				}
				byName := map[string]*tracepb.Span{}
				for _, s := range tr.children[hex.EncodeToString(trial.SpanId)] {
					byName[s.Name] = s
				}
				chat := byName["chat scripted-capitals"]
				if chat == nil {
					t.Fatalf("trial %s: no chat span among %v", rec, keys(byName))
				}
				want := map[string]any{
					telemetry.AttrOperation: "chat", telemetry.AttrProvider: "scripted", telemetry.AttrModel: "scripted-capitals",
					telemetry.AttrResponseModel: "scripted-capitals", telemetry.AttrResponseID: "scripted-" + rec + "-1",
					telemetry.AttrModelRole: "agent", telemetry.AttrRecordID: rec,
				}
				ca := attrs(chat.Attributes)
				for k, v := range want {
					if ca[k] != v {
						t.Errorf("trial %s chat span %s = %v, want %v", rec, k, ca[k], v)
					}
				}
				if ca[telemetry.AttrInputTokens].(int64) <= 0 || chat.Kind != tracepb.Span_SPAN_KIND_CLIENT {
					t.Errorf("chat span kind %v attrs %v", chat.Kind, ca)
				}
				if fr := ca[telemetry.AttrFinish]; fr == nil {
					t.Errorf("chat span has no finish reasons: %v", ca)
				}
				exact := 0.0
				if rec == "france" {
					exact = 1
				}
				em := byName["evalsi.evaluator exact-match"]
				if em == nil || attrs(em.Attributes)[telemetry.AttrEvalScore] != exact || attrs(em.Attributes)[telemetry.AttrEvaluator] != "exact-match" {
					t.Errorf("trial %s exact-match span %v", rec, em)
				}
				lj := byName["evalsi.evaluator llm-judge"]
				if lj == nil {
					t.Fatalf("trial %s: no llm-judge span among %v", rec, keys(byName))
				}
				if a := attrs(lj.Attributes); a[telemetry.AttrEvalScore] != 0.75 || a[telemetry.AttrEvalName] != "llm-judge" {
					t.Errorf("llm-judge span attrs %v", a)
				}
				judge := tr.children[hex.EncodeToString(lj.SpanId)]
				if len(judge) != 1 {
					t.Fatalf("llm-judge span has %d children, want the judge's call", len(judge))
				}
				ja := attrs(judge[0].Attributes)
				if judge[0].Name != "chat scripted-judge" || ja[telemetry.AttrModelRole] != "judge" || ja[telemetry.AttrProvider] != "scripted" ||
					ja[telemetry.AttrEvaluator] != "llm-judge" || ja[telemetry.AttrResponseModel] != "scripted-judge" ||
					judge[0].StartTimeUnixNano < lj.StartTimeUnixNano || judge[0].EndTimeUnixNano > lj.EndTimeUnixNano {
					t.Errorf("judge span %q attrs %v", judge[0].Name, ja)
				}
			}
		})
	}
}

func keys(m map[string]*tracepb.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTraceErroredRun: a run whose every trial errored (the model has no
// reply for the record) reads as an error on the run span, with the count;
// each trial's span is an error, with the failed model call under it.
func TestTraceErroredRun(t *testing.T) {
	rc := startProtocol(t, "http/json")
	sum := runText(t, `name: all-errored
dataset:
  records:
    - {id: a, input: "one", expected: x}
    - {id: b, input: "two", expected: y}
target:
  connector: scripted
  model: scripted-silent
  script:
    records:
      other: [{content: "x"}]
retries: 0
evaluators: [exact-match]
`)
	if sum.Errored != 2 {
		t.Fatalf("run: status %s, %d errored, want 2", sum.Status, sum.Errored)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tr := buildTree(t, rc.spans)
	if len(tr.roots) != 1 {
		t.Fatalf("%d roots", len(tr.roots))
	}
	run := tr.roots[0]
	ra := attrs(run.Attributes)
	if run.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || run.Status.GetMessage() != "every trial errored (2 of 2): nothing was scored" ||
		ra["evalsi.errored"] != int64(2) || ra["evalsi.status_label"] != "completed with errors" || ra["evalsi.health"] != "no_scores" {
		t.Errorf("run span status %v attrs %v", run.Status, ra)
	}
	trials := tr.children[hex.EncodeToString(run.SpanId)]
	if len(trials) != 2 {
		t.Fatalf("%d trial spans", len(trials))
	}
	for _, trial := range trials {
		ta := attrs(trial.Attributes)
		if trial.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || ta[telemetry.AttrErrorType] != "model" {
			t.Errorf("trial span %q status %v attrs %v", trial.Name, trial.Status, ta)
		}
		var failed []*tracepb.Span
		for _, s := range tr.children[hex.EncodeToString(trial.SpanId)] {
			if s.Name == "chat scripted-silent" {
				failed = append(failed, s)
			}
		}
		if len(failed) != 1 {
			t.Fatalf("trial %v: %d failed chat spans, want 1", ta[telemetry.AttrRecordID], len(failed))
		}
		fa := attrs(failed[0].Attributes)
		if failed[0].Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || failed[0].Status.GetMessage() == "" ||
			fa[telemetry.AttrErrorType] != "_OTHER" || fa[telemetry.AttrProvider] != "scripted" || fa[telemetry.AttrModel] != "scripted-silent" {
			t.Errorf("failed chat span status %v attrs %v", failed[0].Status, fa)
		}
	}
}

// TestTraceRemoteAgentSpans runs an HTTP agent served on loopback: each
// call to it is a client invoke_agent span with the server's address, and
// the tool its steps report (a tool message without a name) is a span
// named after the call it answers.
func TestTraceRemoteAgentSpans(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "the http agent's task environment needs a sandbox")
	}
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"output": {"text": "Paris"}, "steps": [
			{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "France"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "Paris"},
			{"role": "assistant", "content": "Paris"}]}`)
	}))
	defer agentSrv.Close()
	rc := startProtocol(t, "http/protobuf")
	sum := runText(t, `name: http-agent-traced
dataset:
  records:
    - {id: capital, input: "What is the capital of France?", expected: Paris}
target:
  agent:
    http:
      url: `+agentSrv.URL+`/run
      body_template: '{"question": {{input}}}'
      output_path: output.text
      messages_path: steps
environment:
  sandbox: {network: deny}
evaluators: [includes]
`)
	if sum.Errored != 0 {
		t.Fatalf("run: %d errored", sum.Errored)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tr := buildTree(t, rc.spans)
	if len(tr.roots) != 1 {
		t.Fatalf("%d roots", len(tr.roots))
	}
	trials := tr.children[hex.EncodeToString(tr.roots[0].SpanId)]
	if len(trials) != 1 || trials[0].Name != "invoke_agent http" {
		t.Fatalf("trial spans %v", trials)
	}
	var calls, tools []*tracepb.Span
	for _, s := range tr.children[hex.EncodeToString(trials[0].SpanId)] {
		switch attrs(s.Attributes)[telemetry.AttrOperation] {
		case "invoke_agent":
			calls = append(calls, s)
		case "execute_tool":
			tools = append(tools, s)
		}
	}
	host, port, _ := net.SplitHostPort(agentSrv.Listener.Addr().String())
	if len(calls) != 1 {
		t.Fatalf("%d agent call spans, want 1", len(calls))
	}
	if a := attrs(calls[0].Attributes); calls[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || a[telemetry.AttrAgentName] != "http" ||
		a["server.address"] != host || fmt.Sprint(a["server.port"]) != port {
		t.Errorf("agent call span %q kind %v attrs %v", calls[0].Name, calls[0].Kind, a)
	}
	if len(tools) != 1 {
		t.Fatalf("%d tool spans, want 1", len(tools))
	}
	if a := attrs(tools[0].Attributes); tools[0].Name != "execute_tool lookup" || a[telemetry.AttrToolName] != "lookup" ||
		a[telemetry.AttrToolType] != "extension" || a[telemetry.AttrToolCallID] != "c1" {
		t.Errorf("tool span %q attrs %v", tools[0].Name, a)
	}
}

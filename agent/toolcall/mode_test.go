package toolcall

import (
	"context"
	"strings"
	"testing"

	"evals.si/model"
	"evals.si/modelserver"
	"evals.si/spec"
)

// probeRule matches the probe's user message (see model.ProbeNativeTools).
const probeRule = "evalsi native tool probe"

// endpoint starts a scripted model server on loopback whose answer to the
// native tool probe is probeReply, and returns it with an openai connector
// pointed at it.
func endpoint(t *testing.T, probeReply spec.ScriptReply) (*modelserver.Server, model.Connector) {
	t.Helper()
	srv := modelserver.New(&spec.Script{
		Rules:   []spec.ScriptRule{{Contains: probeRule, Replies: []spec.ScriptReply{probeReply}}},
		Default: []spec.ScriptReply{{Content: "unused"}},
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	retries := 0
	conn, err := model.New(spec.ModelRef{Connector: model.ConnectorOpenAI, Model: "local-model", BaseURL: "http://" + addr.String() + "/v1", MaxRetries: &retries},
		model.Options{Getenv: func(string) string { return "test-key" }})
	if err != nil {
		t.Fatal(err)
	}
	return srv, conn
}

func TestResolveMatrix(t *testing.T) {
	native := spec.ScriptReply{ToolCalls: []spec.ScriptToolCall{{Name: model.ProbeTool}}}
	rejects := spec.ScriptReply{Status: 400}
	textOnly := spec.ScriptReply{Content: "<tool_call>{\"name\": \"evalsi_probe\", \"arguments\": {}}</tool_call>"}
	authFails := spec.ScriptReply{Status: 401}

	rows := []struct {
		name         string
		mode, format string
		endpoint     spec.ScriptReply
		wantMode     Mode
		wantFormat   Format
		wantErr      string
		wantProbes   int
	}{
		{"unset is native without a probe", "", "", rejects, ModeNative, FormatNativeJSON, "", 0},
		{"unset with a prompted format is prompted", "", "fenced_shell", native, ModePrompted, FormatFencedShell, "", 0},
		{"unset with native_json is native", "", "native_json", rejects, ModeNative, FormatNativeJSON, "", 0},
		{"auto with native support", "auto", "", native, ModeNative, FormatNativeJSON, "", 1},
		{"auto with native support ignores a prompted format", "auto", "fenced_shell", native, ModeNative, FormatNativeJSON, "", 1},
		{"auto without native support (400) falls back to tags", "auto", "", rejects, ModePrompted, FormatTags, "", 1},
		{"auto without a tool parser (text reply) falls back", "auto", "", textOnly, ModePrompted, FormatTags, "", 1},
		{"auto falls back to the declared fenced format", "auto", "fenced_shell", rejects, ModePrompted, FormatFencedShell, "", 1},
		{"auto falls back to native_json prompted", "auto", "native_json", textOnly, ModePrompted, FormatNativeJSON, "", 1},
		{"native with support", "native", "", native, ModeNative, FormatNativeJSON, "", 1},
		{"native unsupported fails closed", "native", "native_json", rejects, "", "", "does not support native tool calls", 1},
		{"native with a text-only endpoint fails closed", "native", "", textOnly, "", "", "does not support native tool calls", 1},
		{"prompted needs no probe", "prompted", "", native, ModePrompted, FormatTags, "", 0},
		{"prompted fenced", "prompted", "fenced_shell", native, ModePrompted, FormatFencedShell, "", 0},
		{"prompted native_json is refused", "prompted", "native_json", native, "", "", "use tool_call_tags or fenced_shell", 0},
		{"native tags is refused", "native", "tool_call_tags", native, "", "", "use native_json", 0},
		{"a probe that learns nothing is an error", "auto", "", authFails, "", "", "finding out whether the model endpoint supports native tool calls", 1},
		{"unknown mode", "sometimes", "", native, "", "", "tool_call_mode \"sometimes\" is unknown", 0},
		{"unknown format", "auto", "xml", native, "", "", "tool_call_format \"xml\" is unknown", 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			srv, conn := endpoint(t, r.endpoint)
			probe := func(ctx context.Context) (model.NativeTools, error) {
				return model.ProbeNativeTools(ctx, conn, "local-model")
			}
			p, err := Resolve(context.Background(), r.mode, r.format, probe)
			if r.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), r.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, r.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if p.Mode != r.wantMode || p.Format != r.wantFormat || p.Reason == "" {
					t.Fatalf("protocol = %+v, want %s/%s with a reason", p, r.wantMode, r.wantFormat)
				}
			}
			if n := len(srv.Requests()); n != r.wantProbes {
				t.Errorf("%d requests reached the endpoint, want %d", n, r.wantProbes)
			}
		})
	}
}

func TestProbeRequestCarriesATool(t *testing.T) {
	srv, conn := endpoint(t, spec.ScriptReply{Status: 400})
	nt, err := model.ProbeNativeTools(context.Background(), conn, "local-model")
	if err != nil || nt.Supported || !strings.Contains(nt.Reason, "HTTP 400") {
		t.Fatalf("probe = %+v, %v; want unsupported with the HTTP status", nt, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), `"tools"`) || !strings.Contains(string(reqs[0].Body), model.ProbeTool) {
		t.Fatalf("probe request does not offer the probe tool: %d requests", len(reqs))
	}
}

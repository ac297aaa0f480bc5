package builtin_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/model"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

const testKeyEnv = "EVALSI_TEST_MODEL_KEY"

func requireFixCalcTools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bubblewrap is not installed")
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git is not installed")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
	}
}

// e2eRun is one fix-calc run through the scripted model server.
type e2eRun struct {
	sum     map[string]float64
	errored int
	events  []trajectory.Event
	reqs    []modelserver.Request
	trialEr string
	// startErr is set when the run refused to start.
	startErr error
}

// runFixCalc loads an example spec, serves its script from a scripted
// model server on loopback (plus a rule answering the native tool probe
// with probe), points the target at it with the openai connector, pins the
// ladder to bwrap and runs it embedded.
func runFixCalc(t *testing.T, example, mode, format string, probe spec.ScriptReply) e2eRun {
	t.Helper()
	ctx := t.Context()
	f, err := spec.Load(filepath.Join("../../examples/agents", example))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Spec
	script := *s.Target.Script
	script.Rules = append([]spec.ScriptRule{{Contains: "evalsi native tool probe", Replies: []spec.ScriptReply{probe}}}, script.Rules...)
	srv := modelserver.New(&script, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	retries := 0
	s.Target.ModelRef = spec.ModelRef{Connector: model.ConnectorOpenAI, Model: s.Target.Model,
		BaseURL: "http://" + addr.String() + "/v1", APIKeyEnv: testKeyEnv, MaxRetries: &retries}
	s.Harness.Builtin.ToolCallMode, s.Harness.Builtin.ToolCallFormat = mode, format
	s.Environment.Sandbox.Ladder = []string{"bwrap"}
	// The code-quality judge of the native example is not what this test
	// is about, and it would need its own endpoint.
	s.Judge = nil
	s.Evaluators = []spec.Evaluator{{Name: "task-success"}, {Name: "policy-violations"}}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"),
		Getenv: func(k string) string {
			if k == testKeyEnv {
				return "sk-local-test"
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		return e2eRun{startErr: err, reqs: srv.Requests()}
	}
	trials, err := app.Store().ListTrials(ctx, sum.RunID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials: %v, %v", trials, err)
	}
	events, err := app.Store().Events(ctx, trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e2eRun{sum: sum.Scores, errored: sum.Errored, events: events, reqs: srv.Requests(), trialEr: trialError(trials[0])}
}

func trialError(tr store.Trial) string {
	b, _ := json.Marshal(tr)
	return string(b)
}

func (r e2eRun) toolCalls() []trajectory.ToolCall {
	var out []trajectory.ToolCall
	for _, e := range r.events {
		if e.Kind == trajectory.KindToolCall {
			out = append(out, *e.ToolCall)
		}
	}
	return out
}

// chatBodies decodes the chat completion requests (not the probe).
func (r e2eRun) chatBodies(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, q := range r.reqs {
		if !strings.HasSuffix(q.Path, "/chat/completions") || strings.Contains(string(q.Body), "evalsi native tool probe") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(q.Body, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func probes(r e2eRun) int {
	n := 0
	for _, q := range r.reqs {
		if strings.Contains(string(q.Body), "evalsi native tool probe") {
			n++
		}
	}
	return n
}

func TestFixCalcThroughModelServerInEachMode(t *testing.T) {
	requireFixCalcTools(t)
	nativeProbe := spec.ScriptReply{ToolCalls: []spec.ScriptToolCall{{Name: model.ProbeTool}}}
	noTools := spec.ScriptReply{Status: 400}

	rows := []struct {
		name, example, mode, format string
		probe                       spec.ScriptReply
		wantProbes                  int
		wantPrompted                bool
		wantTools                   string
		protocolText                string
	}{
		{"prompted tool_call_tags", "fix-calc-prompted-tags.yaml", "prompted", "tool_call_tags", nativeProbe, 0, true, "bash,write_file,bash", "<tool_call>"},
		{"prompted fenced_shell", "fix-calc-prompted-fenced.yaml", "prompted", "fenced_shell", nativeProbe, 0, true, "bash,bash,bash", "```bash"},
		{"auto falls back to prompted tags on an endpoint without tools", "fix-calc-prompted-tags.yaml", "auto", "", noTools, 1, true, "bash,write_file,bash", "<tool_call>"},
		{"auto falls back to the declared fenced format", "fix-calc-prompted-fenced.yaml", "auto", "fenced_shell", noTools, 1, true, "bash,bash,bash", "```bash"},
		{"native", "fix-calc-offline.yaml", "native", "native_json", nativeProbe, 1, false, "bash,write_file,bash", ""},
		{"auto picks native when supported", "fix-calc-offline.yaml", "auto", "", nativeProbe, 1, false, "bash,write_file,bash", ""},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := runFixCalc(t, row.example, row.mode, row.format, row.probe)
			if r.errored != 0 || r.sum["task-success"] != 1 {
				t.Fatalf("task-success %v, errored %d; trial %s", r.sum["task-success"], r.errored, r.trialEr)
			}
			var names []string
			for _, c := range r.toolCalls() {
				names = append(names, c.Name)
				if strings.Contains(string(c.Arguments), "os.remove") {
					t.Errorf("the python block in the reply was run: %s", c.Arguments)
				}
			}
			if got := strings.Join(names, ","); got != row.wantTools {
				t.Errorf("tool calls = %s, want %s", got, row.wantTools)
			}
			if n := probes(r); n != row.wantProbes {
				t.Errorf("%d probe requests, want %d", n, row.wantProbes)
			}
			bodies := r.chatBodies(t)
			if len(bodies) != 4 {
				t.Fatalf("%d chat requests, want 4", len(bodies))
			}
			for i, b := range bodies {
				_, hasTools := b["tools"]
				if hasTools == row.wantPrompted {
					t.Errorf("request %d: tools sent = %v in prompted = %v", i+1, hasTools, row.wantPrompted)
				}
			}
			if !row.wantPrompted {
				return
			}
			msgs := bodies[1]["messages"].([]any)
			system := msgs[0].(map[string]any)["content"].(string)
			if !strings.Contains(system, row.protocolText) || !strings.Contains(system, "How to call tools") {
				t.Errorf("system message does not state the protocol:\n%s", system)
			}
			// The first step's result comes back as a user message.
			last := msgs[len(msgs)-1].(map[string]any)
			if last["role"] != "user" || !strings.Contains(last["content"].(string), `<tool_result name="bash" id="call_1_0">`) {
				t.Errorf("last message of request 2 = %v, want the user message with the tool result", last)
			}
			for _, m := range msgs {
				if m.(map[string]any)["role"] == "tool" {
					t.Errorf("a tool-role message was sent in prompted mode: %v", m)
				}
			}
		})
	}
}

func TestFixCalcNativeOnEndpointWithoutToolsFailsClosed(t *testing.T) {
	requireFixCalcTools(t)
	r := runFixCalc(t, "fix-calc-offline.yaml", "native", "", spec.ScriptReply{Status: 400})
	// The run refuses to start, as a spec error, before any trial runs.
	var se embedded.SpecError
	if !errors.As(r.startErr, &se) {
		t.Fatalf("run error = %v, want a SpecError refusing to start", r.startErr)
	}
	if !strings.Contains(r.startErr.Error(), "does not support native tool calls") {
		t.Errorf("error does not say why: %v", r.startErr)
	}
	if n := len(r.chatBodies(t)); n != 0 {
		t.Errorf("%d chat requests after the failed probe, want none", n)
	}
}

// The prompted examples run as shipped: offline, on the in-process scripted
// connector, which returns each reply's content as written.
func TestPromptedExamplesOffline(t *testing.T) {
	requireFixCalcTools(t)
	for _, example := range []string{"fix-calc-prompted-tags.yaml", "fix-calc-prompted-fenced.yaml"} {
		t.Run(example, func(t *testing.T) {
			ctx := t.Context()
			f, err := spec.Load(filepath.Join("../../examples/agents", example))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
			app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(t.TempDir(), "evalsi.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { app.Close() })
			sum, err := app.Run(ctx, f, embedded.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Errored != 0 || sum.Scores["task-success"] != 1 || sum.Scores["policy-clean"] != 1 || sum.Scores["agent-steps"] != 4 {
				t.Errorf("scores %v, errored %d", sum.Scores, sum.Errored)
			}
		})
	}
}

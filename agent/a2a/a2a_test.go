package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"evals.si/agent"
	"evals.si/agent/a2a"
	"evals.si/agent/remote/remotetest"
	"evals.si/internal/testenv"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// executor is the a2a-go test agent. It behaves like testdata/js_agent.mjs:
// "clarify" asks "Which unit?" and the reply completes with "42 <reply>",
// "fail" fails the task, "hi" answers with a message (no task), anything
// else completes with an artifact "go echo: <text>" ("Paris" when asked for
// the capital of France).
type executor struct {
	mu       sync.Mutex
	contexts []string
}

func text(parts sdk.ContentParts) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text())
	}
	return b.String()
}

func (e *executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		in := text(ec.Message.Parts)
		e.mu.Lock()
		e.contexts = append(e.contexts, ec.ContextID)
		e.mu.Unlock()
		if strings.Contains(in, "capital of France") {
			in = "Paris"
		}
		if in == "hi" {
			yield(sdk.NewMessage(sdk.MessageRoleAgent, sdk.NewTextPart("hello there")), nil)
			return
		}
		if ec.StoredTask == nil {
			if !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		}
		if !yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateWorking, nil), nil) {
			return
		}
		say := func(s string) *sdk.Message {
			return sdk.NewMessageForTask(sdk.MessageRoleAgent, ec, sdk.NewTextPart(s))
		}
		switch {
		case strings.Contains(in, "fail"):
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateFailed, say("cannot do that")), nil)
		case strings.Contains(in, "clarify") && ec.StoredTask == nil:
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateInputRequired, say("Which unit?")), nil)
		default:
			answer := "go echo: " + in
			if in == "Paris" {
				answer = in
			}
			if ec.StoredTask != nil {
				answer = "42 " + in
			}
			if !yield(sdk.NewArtifactEvent(ec, sdk.NewTextPart(answer)), nil) {
				return
			}
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
		}
	}
}

func (e *executor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, nil), nil)
	}
}

// goAgent serves the executor over JSON-RPC on loopback: v1.0 at /rpc,
// v0.3 at /rpc0, each only when listed in versions; the agent card (when
// card is set) declares them. It records the X-Api-Key header of every
// request.
type goAgent struct {
	URL  string
	exec *executor
	mu   sync.Mutex
	keys []string
}

func startGoAgent(t *testing.T, versions []string, card bool) *goAgent {
	t.Helper()
	g := &goAgent{exec: &executor{}}
	mux := http.NewServeMux()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.keys = append(g.keys, r.Header.Get("X-Api-Key"))
		g.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	g.URL = ts.URL
	h := a2asrv.NewHandler(g.exec)
	var ifaces []*sdk.AgentInterface
	for _, v := range versions {
		switch v {
		case a2a.V1:
			mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(h))
			ifaces = append(ifaces, &sdk.AgentInterface{URL: ts.URL + "/rpc", ProtocolBinding: sdk.TransportProtocolJSONRPC, ProtocolVersion: sdk.ProtocolVersion(v)})
		case a2a.V0:
			mux.Handle("/rpc0", a2av0.NewJSONRPCHandler(h))
			ifaces = append(ifaces, &sdk.AgentInterface{URL: ts.URL + "/rpc0", ProtocolBinding: sdk.TransportProtocolJSONRPC, ProtocolVersion: sdk.ProtocolVersion(v)})
		}
	}
	if card {
		c := &sdk.AgentCard{Name: "go-test-agent", Description: "test", Version: "1.0.0", SupportedInterfaces: ifaces,
			DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []sdk.AgentSkill{{ID: "echo", Name: "echo", Description: "echo", Tags: []string{"test"}}}}
		if slices.Contains(versions, a2a.V0) {
			mux.Handle("/.well-known/agent-card.json", a2asrv.NewAgentCardHandler(a2av0.NewStaticAgentCardProducer(c)))
		} else {
			mux.Handle("/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(c))
		}
	}
	return g
}

// startJSAgent runs testdata/js_agent.mjs (the official JS SDK) with the
// card declaring versions, and returns its base URL.
func startJSAgent(t *testing.T, versions string) string {
	t.Helper()
	npm := testenv.NodeModules(t, "@a2a-js/sdk")
	testenv.NodeModules(t, "express")
	if _, err := os.Stat("/usr/bin/node"); err != nil {
		testenv.Missing(t, "node", "/usr/bin/node is not installed")
	}
	// ES modules ignore NODE_PATH: the script is placed next to a
	// node_modules that resolves to the installed peers.
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "js_agent.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "js_agent.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(npm, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/node", filepath.Join(dir, "js_agent.mjs"))
	cmd.Env = append(os.Environ(), "A2A_VERSIONS="+versions, "PORT=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if port, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return "http://127.0.0.1:" + port
		}
	}
	t.Fatalf("the JS agent exited before listening: %v", sc.Err())
	return ""
}

type events []trajectory.Event

func (e events) logs() string {
	var out []string
	for _, ev := range e {
		if ev.Kind == trajectory.KindLog {
			out = append(out, ev.Log.Text)
		}
	}
	return strings.Join(out, "\n")
}

func (e events) stop() *trajectory.Stop {
	if len(e) == 0 || e[len(e)-1].Kind != trajectory.KindStop {
		return nil
	}
	return e[len(e)-1].Stop
}

func runTask(t *testing.T, cfg spec.A2AAgent, opts model.Options, instruction string, user agent.User) (agent.Result, events, error) {
	t.Helper()
	a, err := a2a.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	var evs events
	task := agent.Task{RecordID: "r1", Instruction: instruction, User: user,
		Emit: trajectory.SinkFunc(func(e trajectory.Event) error { evs = append(evs, e); return nil })}
	res, err := a.Run(context.Background(), task)
	return res, evs, err
}

// TestA2APeers runs the same tasks against agents built with a2a-go and
// with the JS SDK, speaking v1.0 and v0.3, found through their agent card
// or (Go) through the no-card fallback.
func TestA2APeers(t *testing.T) {
	peers := []struct {
		name    string
		url     func(t *testing.T) string
		version string
		echo    string
	}{
		{"go v1.0 card", func(t *testing.T) string { return startGoAgent(t, []string{a2a.V1}, true).URL }, a2a.V1, "go echo: "},
		{"go v0.3 card", func(t *testing.T) string { return startGoAgent(t, []string{a2a.V0}, true).URL }, a2a.V0, "go echo: "},
		{"go v1.0+v0.3 card picks v1.0", func(t *testing.T) string { return startGoAgent(t, []string{a2a.V0, a2a.V1}, true).URL }, a2a.V1, "go echo: "},
		{"go v1.0 no card", func(t *testing.T) string { return startGoAgent(t, []string{a2a.V1}, false).URL + "/rpc" }, a2a.V1, "go echo: "},
		{"go v0.3 no card falls back", func(t *testing.T) string { return startGoAgent(t, []string{a2a.V0}, false).URL + "/rpc0" }, a2a.V0, "go echo: "},
		{"js v1.0 card", func(t *testing.T) string { return startJSAgent(t, "1.0") }, a2a.V1, "js echo: "},
		{"js v0.3 card", func(t *testing.T) string { return startJSAgent(t, "0.3") }, a2a.V0, "js echo: "},
	}
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			url := p.url(t)
			cfg := spec.A2AAgent{URL: url}

			res, evs, err := runTask(t, cfg, model.Options{}, "what is 6*7?", nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != p.echo+"what is 6*7?" || res.StopReason != agent.StopAnswered || res.Steps != 1 {
				t.Errorf("echo: result = %+v", res)
			}
			if !strings.Contains(evs.logs(), "speaking A2A v"+p.version) {
				t.Errorf("want A2A v%s, logs:\n%s", p.version, evs.logs())
			}
			if !strings.Contains(evs.logs(), ": completed") {
				t.Errorf("the completed state is not recorded:\n%s", evs.logs())
			}

			user := &remotetest.User{Replies: []string{"celsius"}}
			res, evs, err = runTask(t, cfg, model.Options{}, "clarify the temperature", user)
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != "42 celsius" || res.Steps != 2 {
				t.Errorf("input-required: result = %+v", res)
			}
			if len(user.Seen) < 1 || user.Seen[0][len(user.Seen[0])-1].Content != "Which unit?" {
				t.Errorf("the user simulator saw %+v, want the agent's question last", user.Seen)
			}
			if !strings.Contains(evs.logs(), ": input-required") {
				t.Errorf("input-required is not recorded:\n%s", evs.logs())
			}

			res, evs, err = runTask(t, cfg, model.Options{}, "please fail", nil)
			if err != nil {
				t.Fatalf("a failed task is an answer, not an infra error: %v", err)
			}
			if res.Output != "cannot do that" || evs.stop() == nil || evs.stop().Detail != "task ended failed" {
				t.Errorf("failed task: result %+v, stop %+v", res, evs.stop())
			}
		})
	}
}

func TestA2AInputRequiredWithoutUser(t *testing.T) {
	g := startGoAgent(t, []string{a2a.V1}, true)
	res, evs, err := runTask(t, spec.A2AAgent{URL: g.URL}, model.Options{}, "clarify this", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "Which unit?" || !strings.Contains(evs.stop().Detail, "input-required") {
		t.Errorf("result %+v, stop %+v", res, evs.stop())
	}
}

// TestA2AConversationKeepsContext: after a completed task and after a
// direct message, the user's next message goes to the same contextId; the
// header from headers_env reaches every request.
func TestA2AConversationKeepsContext(t *testing.T) {
	g := startGoAgent(t, []string{a2a.V1}, true)
	user := &remotetest.User{Replies: []string{"hi", "more"}}
	opts := model.Options{Getenv: func(k string) string { return map[string]string{"AGENT_KEY": "k-123"}[k] }}
	res, evs, err := runTask(t, spec.A2AAgent{URL: g.URL, HeadersEnv: map[string]string{"X-Api-Key": "AGENT_KEY"}}, opts, "first", user)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "go echo: more" || res.Steps != 3 {
		t.Errorf("result = %+v", res)
	}
	ctxs := g.exec.contexts
	if len(ctxs) != 3 || ctxs[0] == "" || ctxs[1] != ctxs[0] || ctxs[2] != ctxs[0] {
		t.Errorf("context ids = %q, want one context", ctxs)
	}
	for i, k := range g.keys {
		if k != "k-123" {
			t.Errorf("request %d has X-Api-Key %q", i, k)
		}
	}
	var roles []string
	for _, e := range evs {
		if e.Kind == trajectory.KindMessage {
			roles = append(roles, e.Message.Role)
		}
		if e.Kind == trajectory.KindLog && strings.Contains(e.Log.Text, "k-123") {
			t.Errorf("a header value was logged: %q", e.Log.Text)
		}
	}
	if got := strings.Join(roles, ","); got != "user,assistant,user,assistant,user,assistant" {
		t.Errorf("message roles = %s", got)
	}
}

func TestA2AInfraErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer broken.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "agent-card.json") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc": "2.0", "id": `))
	}))
	defer garbage.Close()
	for _, tc := range []struct{ name, url string }{
		{"connection refused", refused},
		{"5xx", broken.URL},
		{"malformed reply", garbage.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, evs, err := runTask(t, spec.A2AAgent{URL: tc.url}, model.Options{}, "x", nil)
			if err == nil {
				t.Fatalf("want an error, got %+v", res)
			}
			if res.StopReason != agent.StopError || evs.stop() == nil || evs.stop().Reason != agent.StopError {
				t.Errorf("result %+v, stop %+v", res, evs.stop())
			}
		})
	}
}

func TestA2ANewRefusesBadSpecs(t *testing.T) {
	if _, err := a2a.New(spec.A2AAgent{URL: "localhost:9999"}, model.Options{}); err == nil {
		t.Error("a URL without scheme was accepted")
	}
	_, err := a2a.New(spec.A2AAgent{URL: "http://127.0.0.1:1", HeadersEnv: map[string]string{"Authorization": "UNSET_VAR"}}, model.Options{Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "UNSET_VAR") {
		t.Errorf("err = %v, want one naming UNSET_VAR", err)
	}
}

// TestA2AFollowsAWorkingTask: an agent that answers SendMessage with a task
// still working is polled with GetTask until the task completes (a raw
// v1.0 JSON-RPC agent without a card, so the fallback is used too).
func TestA2AFollowsAWorkingTask(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rpc" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		methods = append(methods, req.Method)
		polls := len(methods) - 1
		mu.Unlock()
		task := map[string]any{"id": "t1", "contextId": "c1", "status": map[string]any{"state": "TASK_STATE_WORKING"}}
		var result any = task
		switch {
		case req.Method == "SendMessage":
			result = map[string]any{"task": task}
		case req.Method == "GetTask" && polls >= 2:
			task["status"] = map[string]any{"state": "TASK_STATE_COMPLETED"}
			task["artifacts"] = []any{map[string]any{"artifactId": "a1", "parts": []any{map[string]any{"text": "done after polling"}}}}
		case req.Method != "GetTask":
			http.Error(w, "unexpected method "+req.Method, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	}))
	defer ts.Close()
	res, evs, err := runTask(t, spec.A2AAgent{URL: ts.URL + "/rpc"}, model.Options{}, "long job", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "done after polling" {
		t.Errorf("output = %q", res.Output)
	}
	if got := strings.Join(methods, ","); got != "SendMessage,GetTask,GetTask" {
		t.Errorf("methods = %s", got)
	}
	if logs := evs.logs(); !strings.Contains(logs, "a2a task t1: working") || !strings.Contains(logs, "a2a task t1: completed") {
		t.Errorf("states not recorded:\n%s", logs)
	}
}

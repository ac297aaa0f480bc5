package httpagent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"evals.si/agent"
	"evals.si/agent/httpagent"
	"evals.si/agent/remote/remotetest"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

type request struct {
	Question string `json:"question"`
	History  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"history"`
	ID string `json:"id"`
}

// server is an agent endpoint: it answers "turns=<n> last=<question>" and
// reports a tool step, and records the requests and their Authorization.
type server struct {
	mu    sync.Mutex
	reqs  []request
	auths []string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req request
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.auths = append(s.auths, r.Header.Get("Authorization"))
	s.mu.Unlock()
	switch req.Question {
	case "boom":
		http.Error(w, "internal", http.StatusInternalServerError)
		return
	case "shapeless":
		_, _ = w.Write([]byte(`{"result": 1}`))
		return
	}
	answer := "turns=" + itoa(len(req.History)) + " last=" + req.Question
	writeJSON(w, map[string]any{
		"output": map[string]any{"text": answer},
		"steps": []any{
			map[string]any{"role": "user", "content": req.Question},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
				map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "lookup", "arguments": `{"q":"x"}`}},
			}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "found"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": answer}}},
		},
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func TestHTTPAgentMultiTurnStepsAndHeaders(t *testing.T) {
	srv := &server{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cfg := spec.HTTPAgent{
		URL:          ts.URL,
		BodyTemplate: `{"question": "{{input}}", "history": {{messages}}, "id": {{task_id}}}`,
		OutputPath:   "output.text",
		MessagesPath: "steps",
		HeadersEnv:   map[string]string{"Authorization": "AGENT_TOKEN"},
	}
	a, err := httpagent.New(cfg, model.Options{Getenv: remotetest.Env(map[string]string{"AGENT_TOKEN": "Bearer s3cret"})})
	if err != nil {
		t.Fatal(err)
	}
	evs, sink := remotetest.Collect()
	res, err := a.Run(context.Background(), agent.Task{RecordID: "r1", Trial: 2, Instruction: `say "hi"`, Emit: sink, User: &remotetest.User{Replies: []string{"again"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "turns=3 last=again" {
		t.Errorf("output = %q", res.Output)
	}
	if res.Steps != 4 {
		t.Errorf("steps = %d, want 4 (two assistant messages per turn)", res.Steps)
	}
	if len(srv.reqs) != 2 || srv.reqs[0].Question != `say "hi"` || srv.reqs[0].ID != "r1/2" {
		t.Fatalf("requests = %+v", srv.reqs)
	}
	if h := srv.reqs[1].History; len(h) != 3 || h[1].Role != "assistant" || h[1].Content != `turns=1 last=say "hi"` || h[2].Content != "again" {
		t.Errorf("second request's history = %+v", h)
	}
	for _, a := range srv.auths {
		if a != "Bearer s3cret" {
			t.Errorf("Authorization = %q", a)
		}
	}
	for _, e := range *evs {
		if e.Kind == trajectory.KindToolCall && (e.ToolCall.Name != "lookup" || string(e.ToolCall.Arguments) != `{"q":"x"}`) {
			t.Errorf("tool call = %+v", e.ToolCall)
		}
	}
	want := "message,message,tool_call,tool_result,message,message,message,tool_call,tool_result,message,stop"
	if got := remotetest.Kinds(*evs); got != want {
		t.Errorf("events = %s\nwant     %s", got, want)
	}
}

func TestHTTPAgentDefaultsAndRawText(t *testing.T) {
	var got map[string]any
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			t.Errorf("method %s, want POST by default", r.Method)
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		_, _ = w.Write([]byte("plain answer"))
	}))
	defer ts.Close()
	a, err := httpagent.New(spec.HTTPAgent{URL: ts.URL}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, sink := remotetest.Collect()
	res, err := a.Run(context.Background(), agent.Task{RecordID: "r", Instruction: "q", Emit: sink})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "plain answer" || res.Steps != 1 {
		t.Errorf("result = %+v", res)
	}
	if got["input"] != "q" || got["task_id"] != "r/0" || len(got["messages"].([]any)) != 1 {
		t.Errorf("default body = %v", got)
	}
}

func TestHTTPAgentInfraErrors(t *testing.T) {
	ts := httptest.NewServer(&server{})
	defer ts.Close()
	for _, tc := range []struct{ name, input, want string }{
		{"5xx", "boom", "500"},
		{"no answer at output_path", "shapeless", `no key "output"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := httpagent.New(spec.HTTPAgent{URL: ts.URL, BodyTemplate: `{"question": {{input}}}`, OutputPath: "output.text"}, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, sink := remotetest.Collect()
			res, err := a.Run(context.Background(), agent.Task{RecordID: "r", Instruction: tc.input, Emit: sink})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if res.StopReason != agent.StopError {
				t.Errorf("stop reason %q", res.StopReason)
			}
		})
	}
}

func TestHTTPAgentNewRefusesBadSpecs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  spec.HTTPAgent
		want string
	}{
		{"invalid JSON after substitution", spec.HTTPAgent{URL: "http://127.0.0.1:1", BodyTemplate: `{"q": {{input}}`}, "not valid JSON"},
		{"unknown placeholder", spec.HTTPAgent{URL: "http://127.0.0.1:1", BodyTemplate: `{"q": {{prompt}}}`}, "{{prompt}}"},
		{"unset header variable", spec.HTTPAgent{URL: "http://127.0.0.1:1", HeadersEnv: map[string]string{"X-Key": "NOPE_UNSET"}}, "NOPE_UNSET"},
		{"bad method", spec.HTTPAgent{URL: "http://127.0.0.1:1", Method: "DELETE"}, "method"},
		{"bad url", spec.HTTPAgent{URL: "127.0.0.1:1"}, "url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httpagent.New(tc.cfg, model.Options{Getenv: remotetest.Env(nil)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

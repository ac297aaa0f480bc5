package httpagent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"evals.si/agent/remote/remotetest"
)

// capitalAgent answers examples/agents/http.yaml's request shape.
func capitalAgent(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Question string `json:"question"`
			Session  string `json:"session"`
		}
		if err := json.Unmarshal(b, &req); err != nil || r.URL.Path != "/run" || req.Session == "" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		answer := "I do not know."
		if strings.Contains(req.Question, "capital of France") {
			answer = "Paris"
		}
		writeJSON(w, map[string]any{"output": map[string]any{"text": answer}, "steps": []any{
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c1", "name": "atlas", "arguments": map[string]any{"country": "France"}}}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "name": "atlas", "content": "capital: Paris"},
			map[string]any{"role": "assistant", "content": answer},
		}})
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestHTTPExampleEndToEnd: examples/agents/http.yaml against a loopback
// agent. The answer is graded by includes, and the task's environment is
// built and checked in the sandbox: with a checker that fails, the same
// answer leaves task-success at 0.
func TestHTTPExampleEndToEnd(t *testing.T) {
	ts := capitalAgent(t)
	scores, evs := remotetest.Example(t, "http.yaml", "http://127.0.0.1:8090", ts.URL)
	if scores["includes"] != 1 || scores["task-success"] != 1 {
		t.Errorf("scores = %v, want includes 1 and task-success 1", scores)
	}
	got := remotetest.Kinds(evs)
	for _, want := range []string{"message,message,tool_call,tool_result,message,stop", "checker"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %s lack %s", got, want)
		}
	}

	scores, _ = remotetest.Example(t, "http.yaml", "http://127.0.0.1:8090", ts.URL, [2]string{"test -s notes.txt", "test -s missing.txt"})
	if scores["includes"] != 1 || scores["task-success"] != 0 {
		t.Errorf("with a failing checker: scores = %v, want includes 1 and task-success 0", scores)
	}
}

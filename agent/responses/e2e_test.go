package responses_test

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"evals.si/agent/remote/remotetest"
	"evals.si/modelserver"
)

// TestResponsesExampleEndToEnd: examples/agents/responses.yaml against the
// scripted model server with examples/agents/responses-script.yaml: the
// answer is graded by includes, usage reaches agent-efficiency, and the
// task's environment is built and checked.
func TestResponsesExampleEndToEnd(t *testing.T) {
	script, err := modelserver.LoadScript(filepath.Join("..", "..", "examples", "agents", "responses-script.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ms := modelserver.New(script, nil)
	ts := httptest.NewServer(ms)
	defer ts.Close()
	scores, evs := remotetest.Example(t, "responses.yaml", "http://127.0.0.1:8089/v1", ts.URL+"/v1")
	if scores["includes"] != 1 || scores["task-success"] != 1 || scores["agent-tokens"] <= 0 || scores["agent-steps"] != 1 {
		t.Errorf("scores = %v, want includes 1, task-success 1, agent-tokens > 0, agent-steps 1", scores)
	}
	if n := len(ms.Requests()); n != 1 {
		t.Errorf("%d requests to the model server, want 1", n)
	}
	if !remotetest.Checked(evs) {
		t.Errorf("no passing checker event in %d events", len(evs))
	}
}

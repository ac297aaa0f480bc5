package httpagent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"evals.si/agent"
	"evals.si/agent/httpagent"
	"evals.si/agent/remote/remotetest"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// TestHTTPAgentToolResultCarriesToolName: a tool message that does not
// repeat its tool's name is recorded with the name of the call it answers.
func TestHTTPAgentToolResultCarriesToolName(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"output": map[string]any{"text": "Paris"},
			"steps": []any{
				map[string]any{"role": "assistant", "tool_calls": []any{
					map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "atlas", "arguments": `{}`}},
				}},
				map[string]any{"role": "tool", "tool_call_id": "c1", "content": "capital: Paris"},
				map[string]any{"role": "assistant", "content": "Paris"},
			},
		})
	}))
	defer ts.Close()
	a, err := httpagent.New(spec.HTTPAgent{URL: ts.URL, OutputPath: "output.text", MessagesPath: "steps"}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, sink := remotetest.Collect()
	if _, err := a.Run(context.Background(), agent.Task{RecordID: "r", Instruction: "q", Emit: sink}); err != nil {
		t.Fatal(err)
	}
	var results []trajectory.ToolResult
	for _, e := range *evs {
		if e.Kind == trajectory.KindToolResult {
			results = append(results, *e.ToolResult)
		}
	}
	if len(results) != 1 || results[0].Name != "atlas" || results[0].CallID != "c1" {
		t.Errorf("tool results %+v, want one named atlas answering c1", results)
	}
}

package mcpagent_test

import (
	"strings"
	"testing"

	"evals.si/agent/remote/remotetest"
)

// TestMCPExampleEndToEnd: examples/agents/mcp.yaml against a go-sdk MCP
// server: the answer is graded by includes and the task's environment is
// built and checked.
func TestMCPExampleEndToEnd(t *testing.T) {
	url, calls := mcpServer(t)
	scores, evs := remotetest.Example(t, "mcp.yaml", "http://127.0.0.1:8931/mcp", url)
	if scores["includes"] != 1 || scores["task-success"] != 1 {
		t.Errorf("scores = %v, want includes 1 and task-success 1", scores)
	}
	if got := calls(); len(got) != 1 || !strings.Contains(got[0], "capital of France") {
		t.Errorf("tool calls = %q", got)
	}
	if !remotetest.Checked(evs) {
		t.Errorf("no passing checker event in %d events", len(evs))
	}
}

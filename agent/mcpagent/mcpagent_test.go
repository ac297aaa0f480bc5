package mcpagent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"evals.si/agent"
	"evals.si/agent/mcpagent"
	"evals.si/agent/remote/remotetest"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

type solveIn struct {
	Question string `json:"question"`
}

// mcpServer serves a go-sdk MCP server over streamable HTTP on loopback
// with two tools: solve (answers "answer to: <question>", and "1000" to a
// question about 10 cubed, "Paris" to one about
// the capital of France) and refuse (always isError).
func mcpServer(t *testing.T) (url string, calls func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "solve", Description: "solves a task"}, func(ctx context.Context, req *mcp.CallToolRequest, in solveIn) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		seen = append(seen, in.Question)
		mu.Unlock()
		answer := "answer to: " + in.Question
		switch {
		case strings.Contains(in.Question, "10 cubed"):
			answer = "1000"
		case strings.Contains(in.Question, "capital of France"):
			answer = "Paris"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answer}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "refuse", Description: "always fails"}, func(ctx context.Context, req *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "I cannot do that"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestMCPAgentMultiTurn(t *testing.T) {
	url, calls := mcpServer(t)
	a, err := mcpagent.New(spec.MCPAgent{URL: url, Tool: "solve", Argument: "question"}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, sink := remotetest.Collect()
	user := &remotetest.User{Replies: []string{"and 10 cubed?"}}
	res, err := a.Run(context.Background(), agent.Task{RecordID: "r1", Instruction: "what is 2+2?", Emit: sink, User: user})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "1000" || res.Steps != 2 || res.StopReason != agent.StopAnswered {
		t.Errorf("result = %+v, want output 1000 after 2 steps, answered", res)
	}
	if got := calls(); len(got) != 2 || got[0] != "what is 2+2?" || got[1] != "and 10 cubed?" {
		t.Errorf("tool calls = %q", got)
	}
	if len(user.Seen) != 2 || user.Seen[0][1].Content != "answer to: what is 2+2?" {
		t.Errorf("user saw %+v", user.Seen)
	}
	var roles []string
	for _, e := range *evs {
		if e.Kind == trajectory.KindMessage {
			roles = append(roles, e.Message.Role)
		}
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant" {
		t.Errorf("message roles = %v", roles)
	}
	if last := (*evs)[len(*evs)-1]; last.Kind != trajectory.KindStop || last.Stop.Reason != agent.StopAnswered {
		t.Errorf("last event = %+v", last)
	}
}

func TestMCPAgentDefaultArgumentAndToolError(t *testing.T) {
	url, _ := mcpServer(t)
	a, err := mcpagent.New(spec.MCPAgent{URL: url, Tool: "refuse"}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, sink := remotetest.Collect()
	res, err := a.Run(context.Background(), agent.Task{RecordID: "r1", Instruction: "do it", Emit: sink})
	if err != nil {
		t.Fatalf("a tool result with isError is an answer, not an infra error: %v", err)
	}
	if res.Output != "I cannot do that" {
		t.Errorf("output = %q", res.Output)
	}
	last := (*evs)[len(*evs)-1]
	if last.Stop == nil || !strings.Contains(last.Stop.Detail, "isError") {
		t.Errorf("stop event %+v does not record the tool error", last)
	}
}

func TestMCPAgentInfraErrors(t *testing.T) {
	url, _ := mcpServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	for _, tc := range []struct{ name, url, tool string }{
		{"connection refused", closed, "solve"},
		{"unknown tool", url, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := mcpagent.New(spec.MCPAgent{URL: tc.url, Tool: tc.tool}, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			evs, sink := remotetest.Collect()
			res, err := a.Run(context.Background(), agent.Task{RecordID: "r1", Instruction: "x", Emit: sink})
			if err == nil {
				t.Fatalf("want an error, got %+v", res)
			}
			if res.StopReason != agent.StopError {
				t.Errorf("stop reason %q", res.StopReason)
			}
			if (*evs)[len(*evs)-1].Kind != trajectory.KindStop {
				t.Errorf("no stop event")
			}
		})
	}
}

func TestMCPAgentNewRejectsBadSpec(t *testing.T) {
	for _, cfg := range []spec.MCPAgent{{URL: "ftp://x", Tool: "t"}, {URL: "http://127.0.0.1:1/mcp"}} {
		if _, err := mcpagent.New(cfg, model.Options{}); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

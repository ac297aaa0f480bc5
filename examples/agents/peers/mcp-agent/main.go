// Command mcp-agent is the peer examples/agents/mcp.yaml drives: an MCP
// server (streamable HTTP) whose tool `solve` takes {"question": "..."} and
// answers it with one call to an OpenAI-compatible model.
//
//	evalsid model-server --script examples/agents/model-server/peer-agents.yaml --listen 127.0.0.1:8089 &
//	go run ./examples/agents/peers/mcp-agent &
//	evalsi run -f examples/agents/mcp.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"evals.si/examples/agents/peers/chat"
)

type solveIn struct {
	Question string `json:"question" jsonschema:"the task, as the user wrote it"`
}

func main() {
	fs := flag.NewFlagSet("mcp-agent", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:8931", "address to serve MCP on (path /mcp)")
	model, keyEnv := chat.Flags(fs)
	fs.Parse(os.Args[1:])
	model.Resolve(*keyEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, model); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-agent:", err)
		os.Exit(1)
	}
}

func newServer(model *chat.Client) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "evalsi-example-mcp-agent", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "solve", Description: "Solves a task and answers in text."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in solveIn) (*mcp.CallToolResult, any, error) {
			if in.Question == "" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "solve: question is empty"}}}, nil, nil
			}
			answer, err := model.Ask(ctx, []chat.Message{{Role: "system", Content: chat.System}, {Role: "user", Content: in.Question}})
			if err != nil {
				// A tool error, not a protocol error: the caller sees why.
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answer}}}, nil, nil
		})
	return srv
}

func run(ctx context.Context, listen string, model *chat.Client) error {
	srv := newServer(model)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	// The address on stdout, so a caller that asked for port 0 learns it.
	fmt.Printf("mcp-agent: serving http://%s/mcp (model %s at %s)\n", ln.Addr(), model.Model, model.BaseURL)
	hs := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

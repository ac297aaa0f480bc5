package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/agent/tools/mcptools"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/trajectory"
)

const everything = "@modelcontextprotocol/server-everything"

// everythingEntry is server-everything's entry script, which takes its
// transport (stdio, streamableHttp) as its first argument.
func everythingEntry(t testing.TB) string {
	t.Helper()
	dir := testenv.NodeModules(t, everything)
	if _, err := os.Stat("/usr/bin/node"); err != nil {
		testenv.Missing(t, "node", "/usr/bin/node runs the MCP test server")
	}
	return filepath.Join(dir, "node_modules", everything, "dist", "index.js")
}

// StdioServer is the spec of server-everything over stdio.
func stdioServer(t testing.TB, name string) spec.MCPServer {
	return spec.MCPServer{Name: name, Command: []string{"/usr/bin/node", everythingEntry(t), "stdio"},
		Env: map[string]string{"EVALSI_MCP_TEST": "visible"}}
}

// httpServer starts server-everything's streamable HTTP transport on a free
// loopback port and returns its endpoint. The server listens where express
// puts it (all interfaces) unless told otherwise, so a preload module pins
// every listen to 127.0.0.1.
func httpServer(t *testing.T) string {
	t.Helper()
	entry := everythingEntry(t)
	preload := filepath.Join(t.TempDir(), "loopback.mjs")
	if err := os.WriteFile(preload, []byte(`import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || typeof args[0] === "string") args.splice(1, 0, "127.0.0.1");
  return listen.apply(this, args);
};
`), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	cmd := exec.Command("/usr/bin/node", "--import", preload, entry, "streamableHttp")
	cmd.Env = []string{"PATH=/usr/bin:/bin", fmt.Sprintf("PORT=%d", port)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "listening on port") {
				ready <- nil
				for sc.Scan() { // keep draining so the server never blocks
				}
				return
			}
		}
		ready <- fmt.Errorf("server exited before listening: %s", strings.Join(lines, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not start listening within 30s")
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

func call(t *testing.T, ctx context.Context, s interface {
	Call(context.Context, trajectory.ToolCall) (trajectory.ToolResult, error)
}, name, args string) trajectory.ToolResult {
	t.Helper()
	res, err := s.Call(ctx, trajectory.ToolCall{ID: "c1", Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func toolNames(s *mcptools.Server) []string {
	var names []string
	for _, t := range s.Tools() {
		names = append(names, t.Name)
	}
	return names
}

func TestEverything(t *testing.T) {
	for _, tc := range []struct {
		transport string
		server    func(t *testing.T) spec.MCPServer
	}{
		{"stdio", func(t *testing.T) spec.MCPServer { return stdioServer(t, "ev") }},
		{"streamableHttp", func(t *testing.T) spec.MCPServer { return spec.MCPServer{Name: "ev", URL: httpServer(t)} }},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			ctx := context.Background()
			srv, err := mcptools.Connect(ctx, "harness.builtin.tools.mcp[0]", tc.server(t), mcptools.Options{Getenv: os.Getenv, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			names := toolNames(srv)
			for _, want := range []string{"ev__echo", "ev__get-sum", "ev__get-env"} {
				if !slices.Contains(names, want) {
					t.Errorf("tools %v lack %s", names, want)
				}
			}
			for _, tool := range srv.Tools() {
				if tool.Name == "ev__echo" {
					var schema struct {
						Properties map[string]any `json:"properties"`
					}
					if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema.Properties["message"] == nil {
						t.Errorf("echo's parameters %s lack the message property (%v)", tool.Parameters, err)
					}
				}
			}

			sess, err := srv.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if res := call(t, ctx, sess, "ev__echo", `{"message":"hello"}`); res.IsError || res.Output != "Echo: hello" || res.Name != "ev__echo" || res.CallID != "c1" {
				t.Errorf("echo: %+v", res)
			}
			if res := call(t, ctx, sess, "ev__get-sum", `{"a":2,"b":40}`); res.IsError || !strings.Contains(res.Output, "42") {
				t.Errorf("get-sum: %+v", res)
			}
			// A call the server rejects is an error result, not a failure.
			if res := call(t, ctx, sess, "ev__echo", `{"message":17}`); !res.IsError || res.Output == "" {
				t.Errorf("echo with a number: want an error result, got %+v", res)
			}
			if res := call(t, ctx, sess, "ev__echo", `not json`); !res.IsError {
				t.Errorf("echo with invalid JSON: want an error result, got %+v", res)
			}

			// Each session has its own server state: toggling in one session
			// and then in a fresh one starts it both times.
			if res := call(t, ctx, sess, "ev__toggle-simulated-logging", `{}`); !strings.HasPrefix(res.Output, "Started") {
				t.Fatalf("toggle in the first session: %+v", res)
			}
			if res := call(t, ctx, sess, "ev__toggle-simulated-logging", `{}`); !strings.HasPrefix(res.Output, "Stopped") {
				t.Fatalf("second toggle in the first session: %+v", res)
			}
			call(t, ctx, sess, "ev__toggle-simulated-logging", `{}`)
			sess2, err := srv.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sess2.Close()
			if res := call(t, ctx, sess2, "ev__toggle-simulated-logging", `{}`); !strings.HasPrefix(res.Output, "Started") {
				t.Errorf("toggle in a second session saw the first one's state: %+v", res)
			}
		})
	}
}

// A stdio server gets only its env plus PATH and HOME.
func TestStdioEnv(t *testing.T) {
	ctx := context.Background()
	t.Setenv("EVALSI_MCP_SECRET", "must-not-leak")
	srv, err := mcptools.Connect(ctx, "harness.builtin.tools.mcp[0]", stdioServer(t, ""), mcptools.Options{Getenv: os.Getenv, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(toolNames(srv), "echo") {
		t.Fatalf("an unnamed server's tools keep their names: %v", toolNames(srv))
	}
	sess, err := srv.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	res := call(t, ctx, sess, "get-env", `{}`)
	var env map[string]string
	if err := json.Unmarshal([]byte(res.Output), &env); err != nil {
		t.Fatalf("get-env output %q: %v", res.Output, err)
	}
	if env["EVALSI_MCP_TEST"] != "visible" || env["PATH"] != os.Getenv("PATH") {
		t.Errorf("env lacks the spec's variable or PATH: %v", env)
	}
	if _, leaked := env["EVALSI_MCP_SECRET"]; leaked {
		t.Errorf("the worker's environment leaked into the server: %v", env)
	}
}

func TestConnectErrors(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A loopback HTTP server that is not MCP.
	go http.Serve(l, http.NotFoundHandler())
	defer l.Close()
	for _, tc := range []struct {
		name string
		cfg  spec.MCPServer
		want []string
	}{
		{"not mcp over http", spec.MCPServer{Name: "web", URL: "http://" + l.Addr().String() + "/mcp"}, []string{"harness.builtin.tools.mcp[0]", `"web"`, "connecting"}},
		{"command fails", spec.MCPServer{Name: "bad", Command: []string{"/bin/sh", "-c", "echo no such server >&2; exit 3"}}, []string{`"bad"`, "no such server"}},
		{"missing command", spec.MCPServer{Command: []string{"/nonexistent/mcp-server"}}, []string{"/nonexistent/mcp-server"}},
		{"bad name", spec.MCPServer{Name: "a b", URL: "http://127.0.0.1:1/"}, []string{"name", "a b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcptools.Connect(ctx, "harness.builtin.tools.mcp[0]", tc.cfg, mcptools.Options{Getenv: os.Getenv})
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Trials open sessions of one server at the same time.
func TestConcurrentSessions(t *testing.T) {
	ctx := context.Background()
	srv, err := mcptools.Connect(ctx, "harness.builtin.tools.mcp[0]", stdioServer(t, "ev"), mcptools.Options{Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			sess, err := srv.Open(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer sess.Close()
			msg := fmt.Sprintf("trial %d", i)
			res, err := sess.Call(ctx, trajectory.ToolCall{Name: "ev__echo", Arguments: json.RawMessage(fmt.Sprintf(`{"message":%q}`, msg))})
			if err == nil && res.Output != "Echo: "+msg {
				err = fmt.Errorf("echo answered %q", res.Output)
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

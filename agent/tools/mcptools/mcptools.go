// Package mcptools gives the built-in agent the tools of MCP servers
// (harness.builtin.tools.mcp), through the official Go SDK.
//
// A server is reached over streamable HTTP (url) or started as a stdio
// command (command). Its tool list is read once, when the run starts; each
// trial then opens its own session (for stdio: its own server process) and
// closes it when the trial ends, so trials never share server state.
//
// A stdio server runs on the worker, outside any sandbox, with the rights
// of the user running evalsi: it is chosen by the spec's author, not by the
// model. Its environment is only what the spec's env lists plus PATH and
// HOME; its working directory is the spec file's directory; its stderr is
// kept (the last few KiB) for error messages.
package mcptools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"evals.si/agent/tools"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Separator joins a server's name and a tool's name in the name the model
// sees: <server>__<tool>.
const Separator = "__"

// discoverTimeout bounds reaching a server and listing its tools at start,
// so a command that never speaks MCP fails the run instead of hanging it.
const discoverTimeout = 60 * time.Second

// stderrKeep is how much of a stdio server's stderr is kept for messages.
const stderrKeep = 4 << 10

// Options configure how servers are reached.
type Options struct {
	// Getenv reads the worker's environment, for PATH and HOME of stdio
	// servers (nil: they are not set).
	Getenv func(string) string
	// Dir is the working directory of stdio servers (the spec's directory).
	Dir string
	// HTTPClient is used for streamable HTTP servers (nil: a default one).
	HTTPClient *http.Client
	// Logger may be nil.
	Logger *slog.Logger
}

// Server is one MCP server's tools; it implements tools.Provider.
type Server struct {
	source string
	cfg    spec.MCPServer
	opts   Options
	client *mcp.Client
	tools  []model.Tool
	orig   map[string]string // model-facing name → the server's name
}

var _ tools.Provider = (*Server)(nil)

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Connect reaches the server, lists its tools and closes that first
// session; source is the server's place in the spec, e.g.
// harness.builtin.tools.mcp[0].
func Connect(ctx context.Context, source string, cfg spec.MCPServer, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := Validate(source, cfg); err != nil {
		return nil, err
	}
	s := &Server{
		source: describe(source, cfg),
		cfg:    cfg,
		opts:   opts,
		// No client capabilities: the agent offers no roots, sampling or
		// elicitation to servers.
		client: mcp.NewClient(&mcp.Implementation{Name: "evalsi", Version: "1"},
			&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}),
		orig: map[string]string{},
	}
	dctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	cs, stderr, err := s.connect(dctx)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	for t, err := range cs.Tools(dctx, nil) {
		if err != nil {
			return nil, s.wrap(fmt.Errorf("listing tools: %w", err), stderr)
		}
		name := t.Name
		if cfg.Name != "" {
			name = cfg.Name + Separator + t.Name
		}
		params := json.RawMessage(`{"type":"object"}`)
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("%s: tool %q: encoding its input schema: %w", s.source, t.Name, err)
			}
			params = b
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		if _, dup := s.orig[name]; dup {
			return nil, fmt.Errorf("%s lists tool %q twice", s.source, t.Name)
		}
		s.orig[name] = t.Name
		s.tools = append(s.tools, model.Tool{Name: name, Description: desc, Parameters: params})
	}
	if len(s.tools) == 0 {
		opts.Logger.Warn("MCP server has no tools", "server", s.source)
	}
	return s, nil
}

func describe(source string, cfg spec.MCPServer) string {
	what := cfg.URL
	if what == "" {
		what = strings.Join(cfg.Command, " ")
	}
	if cfg.Name != "" {
		return fmt.Sprintf("%s (MCP server %q, %s)", source, cfg.Name, what)
	}
	return fmt.Sprintf("%s (MCP server %s)", source, what)
}

// Validate checks a server's spec without reaching it.
func Validate(source string, cfg spec.MCPServer) error {
	if cfg.Name != "" && !serverName.MatchString(cfg.Name) {
		return fmt.Errorf("%s.name: %q may hold only letters, digits, _ and - (it prefixes the tool names the model sees)", source, cfg.Name)
	}
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return fmt.Errorf("%s: an MCP server needs exactly one of url or command", source)
	}
	if cfg.URL != "" {
		u, err := url.Parse(cfg.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http(s) URL of a streamable HTTP MCP endpoint", source, cfg.URL)
		}
	}
	return nil
}

// Source implements tools.Provider.
func (s *Server) Source() string { return s.source }

// Tools implements tools.Provider.
func (s *Server) Tools() []model.Tool { return s.tools }

// Open implements tools.Provider: a new session, for stdio a new process.
func (s *Server) Open(ctx context.Context) (tools.Session, error) {
	cs, stderr, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	return &session{s: s, cs: cs, stderr: stderr}, nil
}

// connect starts a session; stderr is the stdio server's kept stderr (nil
// for HTTP).
func (s *Server) connect(ctx context.Context) (*mcp.ClientSession, *tail, error) {
	var (
		t      mcp.Transport
		stderr *tail
	)
	if s.cfg.URL != "" {
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.opts.HTTPClient,
			// Server-initiated messages (list changes, logs) are not used.
			DisableStandaloneSSE: true}
	} else {
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Env = s.env()
		cmd.Dir = s.opts.Dir
		stderr = &tail{max: stderrKeep}
		cmd.Stderr = stderr
		// A server whose children keep stderr open must not hang Close.
		cmd.WaitDelay = 5 * time.Second
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	cs, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, nil, s.wrap(fmt.Errorf("connecting: %w", err), stderr)
	}
	return cs, stderr, nil
}

// env is a stdio server's environment: PATH and HOME of the worker, then
// the spec's env (which may override them), sorted for stable commands.
func (s *Server) env() []string {
	m := map[string]string{}
	if s.opts.Getenv != nil {
		for _, k := range []string{"PATH", "HOME"} {
			if v := s.opts.Getenv(k); v != "" {
				m[k] = v
			}
		}
	}
	for k, v := range s.cfg.Env {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (s *Server) wrap(err error, stderr *tail) error {
	if msg := stderr.String(); msg != "" {
		return fmt.Errorf("%s: %w (server stderr: %s)", s.source, err, msg)
	}
	return fmt.Errorf("%s: %w", s.source, err)
}

type session struct {
	s      *Server
	cs     *mcp.ClientSession
	stderr *tail
}

// Call implements tools.Session.
func (ss *session) Call(ctx context.Context, call trajectory.ToolCall) (trajectory.ToolResult, error) {
	res := trajectory.ToolResult{CallID: call.ID, Name: call.Name, Type: "extension"}
	orig, ok := ss.s.orig[call.Name]
	if !ok {
		res.IsError = true
		res.Output = fmt.Sprintf("unknown tool %q", call.Name)
		return res, nil
	}
	args := map[string]any{}
	if raw := bytes.TrimSpace(call.Arguments); len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil || args == nil {
			res.IsError = true
			res.Output = fmt.Sprintf("invalid arguments for %s: send a JSON object", call.Name)
			return res, nil
		}
	}
	out, err := ss.cs.CallTool(ctx, &mcp.CallToolParams{Name: orig, Arguments: args})
	if err != nil {
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) {
			// The server refused the call (unknown tool, invalid params):
			// the model can correct it.
			res.IsError = true
			res.Output = fmt.Sprintf("error from MCP server: %s", rpc.Message)
			return res, nil
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, ss.s.wrap(fmt.Errorf("calling tool %s: %w", orig, err), ss.stderr)
	}
	res.IsError = out.IsError
	res.Output = Text(out)
	return res, nil
}

// Close implements tools.Session; a stdio server's process is stopped.
func (ss *session) Close() error {
	if err := ss.cs.Close(); err != nil {
		ss.s.opts.Logger.Debug("closing MCP session", "server", ss.s.source, "err", err)
	}
	return nil
}

// Text renders a tool result as the text the model reads: text content as
// is, embedded text resources as their text, and a one-line note for
// images, audio, links and binary resources, joined by newlines. A result
// with no content but structured content gets that as compact JSON.
func Text(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s %s]", c.URI, c.Name))
		case *mcp.EmbeddedResource:
			switch {
			case c.Resource == nil:
			case c.Resource.Text != "":
				parts = append(parts, c.Resource.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if len(parts) == 0 && r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n")
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(strings.ToValidUTF8(string(t.buf), "\uFFFD"))
}

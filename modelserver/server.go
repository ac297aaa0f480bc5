// Package modelserver is a scripted model server: it answers the real wire
// formats of OpenAI Chat Completions, OpenAI Responses and Anthropic
// Messages, with and without SSE streaming, from a spec.Script. Model
// providers cannot be reached from test machines, so real SDKs and real
// agent CLIs (Claude Code, Codex) are pointed at it on loopback instead.
//
// Reply selection is model.SelectReply: with no record id (or an unknown
// one), the first rule whose Contains occurs in the opening user text (the
// user messages before the first assistant turn), else
// the default list; the index is the number of assistant turns already in
// the request. A client may name the record with the X-Evalsi-Record header.
package modelserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// RecordHeader names the record whose script a request should use.
const RecordHeader = "X-Evalsi-Record"

// maxBody bounds a request body; agent CLIs send large tool lists but
// nothing near this.
const maxBody = 64 << 20

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	// Header is a copy with credentials (Authorization, X-Api-Key, Api-Key)
	// replaced by "REDACTED", so tests can see that one was sent.
	Header http.Header
	// Model and Stream are read from the JSON body when present.
	Model  string
	Stream bool
	Body   []byte
}

// Server answers model API calls from a script. It is safe for concurrent
// use.
type Server struct {
	script *spec.Script
	log    *slog.Logger

	mu       sync.Mutex
	requests []Request
	// failed holds request bodies already answered with a scripted Status,
	// so that the client's retry of the same body gets the reply.
	failed map[[sha256.Size]byte]bool
	// convs holds Responses API conversations (input and output items) by
	// response id, for previous_response_id. It lives as long as the server.
	convs map[string][]json.RawMessage
	seq   int
	// dumpDir, when set, receives every request as a file (see DumpTo).
	dumpDir string
}

// New returns a server for script. A nil logger discards logs.
func New(script *spec.Script, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		script: script,
		log:    logger,
		failed: map[[sha256.Size]byte]bool{},
		convs:  map[string][]json.RawMessage{},
	}
}

// LoadScript reads a script from a YAML or JSON file.
func LoadScript(path string) (*spec.Script, error) { return model.LoadScript(path) }

// Listen serves on addr (e.g. "127.0.0.1:0") until ctx is done and returns
// the address it listens on. In-flight requests are cancelled with ctx.
func (s *Server) Listen(ctx context.Context, addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("model server: listening on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("model server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr(), nil
}

// Requests returns the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	copy(out, s.requests)
	return out
}

// dialect selects the error body format.
type dialect int

const (
	dialectOpenAI dialect = iota
	dialectAnthropic
)

// ServeHTTP routes to the wire formats. Paths are accepted with or without
// the /v1 prefix; query strings (Claude Code's ?beta=true) are ignored.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(w, dialectOpenAI, http.StatusBadRequest, "reading request body: "+err.Error())
		return
	}
	if len(body) > maxBody {
		writeError(w, dialectOpenAI, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	s.record(r, body)
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	d := dialectOpenAI
	if path == "/messages" || r.Header.Get("anthropic-version") != "" {
		d = dialectAnthropic
	}
	s.log.Debug("model request", "method", r.Method, "path", r.URL.Path)

	var handle func(http.ResponseWriter, *http.Request, []byte)
	method := http.MethodPost
	switch path {
	case "/chat/completions":
		handle = s.chatCompletions
	case "/responses":
		handle = s.responses
	case "/messages":
		handle = s.messages
	case "/models":
		handle, method = s.models, http.MethodGet
	default:
		writeError(w, d, http.StatusNotFound, fmt.Sprintf("no route %s %s: this scripted model server serves POST /v1/chat/completions, POST /v1/responses, POST /v1/messages and GET /v1/models", r.Method, r.URL.Path))
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, d, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, method))
		return
	}
	if method == http.MethodPost && !json.Valid(body) {
		writeError(w, d, http.StatusBadRequest, "request body is not valid JSON")
		return
	}
	handle(w, r, body)
}

func (s *Server) record(r *http.Request, body []byte) {
	var probe struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &probe)
	h := r.Header.Clone()
	for _, k := range []string{"Authorization", "X-Api-Key", "Api-Key"} {
		if h.Get(k) != "" {
			h.Set(k, "REDACTED")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: h,
		Model: probe.Model, Stream: probe.Stream, Body: body,
	})
	if s.dumpDir != "" {
		s.dump(len(s.requests), s.requests[len(s.requests)-1])
	}
}

// nextID returns prefix followed by a server-unique number.
func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fmt.Sprintf("%s%d", prefix, s.seq)
}

// scriptedCall is a reply resolved to text, tool calls and usage.
type scriptedCall struct {
	Content string
	Calls   []call
	Usage   trajectory.Usage
}

type call struct {
	// Step and Index build the wire ids (call_<step>_<i>, toolu_…, fc_…).
	Step, Index int
	Name        string
	Arguments   string
}

func (c call) id(prefix string) string { return fmt.Sprintf("%s_%d_%d", prefix, c.Step, c.Index) }

// reply selects the scripted reply. It answers a Status reply's HTTP
// status itself, once per distinct request body, and then returns false.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, d dialect, body []byte, firstUser string, turns int) (scriptedCall, bool) {
	rep, err := model.SelectReply(s.script, r.Header.Get(RecordHeader), firstUser, turns)
	if err != nil {
		writeError(w, d, http.StatusInternalServerError, err.Error())
		return scriptedCall{}, false
	}
	if rep.Status != 0 {
		key := sha256.Sum256(append([]byte(r.URL.Path+"\x00"), body...))
		s.mu.Lock()
		first := !s.failed[key]
		s.failed[key] = true
		s.mu.Unlock()
		if first {
			if rep.Status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "0")
			}
			s.log.Info("scripted failure", "path", r.URL.Path, "status", rep.Status)
			writeError(w, d, rep.Status, fmt.Sprintf("scripted status %d (the same request succeeds when retried)", rep.Status))
			return scriptedCall{}, false
		}
	}
	step := turns + 1
	c := scriptedCall{Content: rep.Content}
	out := len(rep.Content)
	for i, tc := range rep.ToolCalls {
		args := string(model.ToolCallArguments(tc.Arguments))
		c.Calls = append(c.Calls, call{Step: step, Index: i, Name: tc.Name, Arguments: args})
		out += len(tc.Name) + len(args)
	}
	c.Usage = trajectory.Usage{InputTokens: model.EstimateTokens(len(body)), OutputTokens: model.EstimateTokens(out)}
	if rep.InputTokens > 0 {
		c.Usage.InputTokens = rep.InputTokens
	}
	if rep.OutputTokens > 0 {
		c.Usage.OutputTokens = rep.OutputTokens
	}
	return c, true
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, _ []byte) {
	if r.Header.Get("anthropic-version") != "" {
		writeJSON(w, http.StatusOK, map[string]any{
			"data":     []any{map[string]any{"type": "model", "id": model.ScriptedModel, "display_name": "Scripted", "created_at": "2025-01-01T00:00:00Z"}},
			"has_more": false, "first_id": model.ScriptedModel, "last_id": model.ScriptedModel,
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": model.ScriptedModel, "object": "model", "created": 0, "owned_by": "evalsi"}},
	})
}

// writeError writes an error body in the dialect's format.
func writeError(w http.ResponseWriter, d dialect, status int, msg string) {
	if d == dialectAnthropic {
		typ := "api_error"
		switch {
		case status == http.StatusTooManyRequests:
			typ = "rate_limit_error"
		case status == http.StatusNotFound:
			typ = "not_found_error"
		case status == 529:
			typ = "overloaded_error"
		case status < 500:
			typ = "invalid_request_error"
		}
		writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
		return
	}
	typ := "server_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// textOf reads message content: a string, or a list of parts whose "text"
// fields are joined with newlines (OpenAI text / input_text parts,
// Anthropic text blocks).
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var out []string
	for _, p := range parts {
		if p.Text != "" && (p.Type == "" || strings.HasSuffix(p.Type, "text")) {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// pieces splits s into chunks of at most n bytes on rune boundaries, so
// streamed deltas exercise the client's accumulation.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// sse writes server-sent events, flushing each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// send writes one event; an empty name writes a data-only event.
func (e *sse) send(name string, v any) {
	var data []byte
	switch t := v.(type) {
	case string:
		data = []byte(t)
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			data = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
		}
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", data)
	if e.f != nil {
		e.f.Flush()
	}
}

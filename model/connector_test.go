package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/model"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/trajectory"
)

const connectorScript = `
rules:
  - contains: weather
    replies:
      - content: Let me check the weather.
        tool_calls:
          - name: get_weather
            arguments: {city: Paris}
      - content: It is sunny in Paris.
  - contains: counted
    replies:
      - content: counted reply
        input_tokens: 123
        output_tokens: 45
  - contains: ratelimit
    replies:
      - status: 429
        content: answered after a 429
  - contains: flaky
    replies:
      - status: 500
        content: answered after a 500
default:
  - content: Hello there, this is a scripted reply that is long enough to stream in pieces.
`

// startServer runs the scripted model server on loopback for the test.
func startServer(t *testing.T, script string) (*modelserver.Server, string) {
	t.Helper()
	s, err := model.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	srv := modelserver.New(s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + addr.String()
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

type flavour struct {
	connector string
	stream    bool
}

func (f flavour) String() string {
	if f.stream {
		return f.connector + "/stream"
	}
	return f.connector
}

var flavours = []flavour{{"openai", false}, {"openai", true}, {"anthropic", false}, {"anthropic", true}}

// baseURL is where each SDK expects the API root.
func (f flavour) baseURL(server string) string {
	if f.connector == "openai" {
		return server + "/v1"
	}
	return server
}

func (f flavour) connect(t *testing.T, server string, maxRetries int) model.Connector {
	t.Helper()
	ref := spec.ModelRef{Connector: f.connector, Model: "test-model", BaseURL: f.baseURL(server), MaxRetries: &maxRetries}
	c, err := model.New(ref, model.Options{
		Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}),
		Stream: f.stream,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var weatherTool = model.Tool{
	Name:        "get_weather",
	Description: "Weather in a city",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
}

func TestConnectorPlainText(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			srv, base := startServer(t, connectorScript)
			c := f.connect(t, base, 0)
			resp, err := c.Chat(context.Background(), model.Request{
				System:   "You are terse.",
				Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "hi"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			want := "Hello there, this is a scripted reply that is long enough to stream in pieces."
			if resp.Message.Role != trajectory.RoleAssistant || resp.Message.Content != want || len(resp.Message.ToolCalls) != 0 {
				t.Fatalf("message = %+v, want assistant %q", resp.Message, want)
			}
			if resp.Model != "test-model" {
				t.Errorf("model = %q, want test-model", resp.Model)
			}
			if resp.Usage.InputTokens < 1 || resp.Usage.OutputTokens != len(want)/4 {
				t.Errorf("usage = %+v, want input ≥ 1 and output %d", resp.Usage, len(want)/4)
			}
			if resp.StopReason != map[string]string{"openai": "stop", "anthropic": "end_turn"}[f.connector] {
				t.Errorf("stop reason = %q", resp.StopReason)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Stream != f.stream || reqs[0].Model != "test-model" {
				t.Fatalf("server saw %+v", reqs)
			}
			// The key was sent (this SDK version uses Authorization: Bearer
			// for Anthropic too) and the server recorded it redacted.
			if a, k := reqs[0].Header.Get("Authorization"), reqs[0].Header.Get("X-Api-Key"); a != "REDACTED" && k != "REDACTED" {
				t.Errorf("credential headers recorded as %q / %q, want one sent and redacted", a, k)
			}
			// The system prompt goes where each wire format wants it.
			var body map[string]any
			if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
				t.Fatal(err)
			}
			if f.connector == "anthropic" {
				if sys := fmt.Sprint(body["system"]); !strings.Contains(sys, "You are terse.") {
					t.Errorf("system = %v", body["system"])
				}
			} else {
				msgs := body["messages"].([]any)
				if m := msgs[0].(map[string]any); m["role"] != "system" || m["content"] != "You are terse." {
					t.Errorf("first message = %v", m)
				}
			}
		})
	}
}

func TestConnectorToolRoundTrip(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			srv, base := startServer(t, connectorScript)
			c := f.connect(t, base, 0)
			msgs := []trajectory.Message{{Role: trajectory.RoleUser, Content: "What is the weather in Paris?"}}
			resp, err := c.Chat(context.Background(), model.Request{Messages: msgs, Tools: []model.Tool{weatherTool}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Message.ToolCalls) != 1 {
				t.Fatalf("tool calls = %+v, want one", resp.Message.ToolCalls)
			}
			tc := resp.Message.ToolCalls[0]
			wantID := map[string]string{"openai": "call_1_0", "anthropic": "toolu_1_0"}[f.connector]
			if tc.ID != wantID || tc.Name != "get_weather" || compactJSON(t, tc.Arguments) != `{"city":"Paris"}` {
				t.Fatalf("tool call = %+v (args %s)", tc, tc.Arguments)
			}
			if resp.Message.Content != "Let me check the weather." {
				t.Errorf("content with the tool call = %q", resp.Message.Content)
			}
			if resp.StopReason != map[string]string{"openai": "tool_calls", "anthropic": "tool_use"}[f.connector] {
				t.Errorf("stop reason = %q", resp.StopReason)
			}

			msgs = append(msgs, resp.Message, trajectory.Message{Role: trajectory.RoleTool, ToolCallID: tc.ID, Name: tc.Name, Content: `{"sky":"clear"}`})
			resp, err = c.Chat(context.Background(), model.Request{Messages: msgs, Tools: []model.Tool{weatherTool}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != "It is sunny in Paris." || len(resp.Message.ToolCalls) != 0 {
				t.Fatalf("final message = %+v", resp.Message)
			}

			// The second request carries the call and its result in the
			// provider's own shape.
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("server saw %d requests", len(reqs))
			}
			var body struct {
				Tools    []map[string]any `json:"tools"`
				Messages []struct {
					Role       string          `json:"role"`
					Content    json.RawMessage `json:"content"`
					ToolCalls  []chatToolCall  `json:"tool_calls"`
					ToolCallID string          `json:"tool_call_id"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(reqs[1].Body, &body); err != nil {
				t.Fatal(err)
			}
			if len(body.Tools) != 1 {
				t.Fatalf("tools sent = %v", body.Tools)
			}
			if f.connector == "openai" {
				if n := len(body.Messages); n != 3 {
					t.Fatalf("%d messages sent", n)
				}
				a, tr := body.Messages[1], body.Messages[2]
				if a.Role != "assistant" || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_1_0" || a.ToolCalls[0].Function.Name != "get_weather" {
					t.Errorf("assistant message sent = %+v", a)
				}
				if tr.Role != "tool" || tr.ToolCallID != "call_1_0" || string(tr.Content) != `"{\"sky\":\"clear\"}"` {
					t.Errorf("tool message sent = %+v (content %s)", tr, tr.Content)
				}
				if fn := body.Tools[0]["function"].(map[string]any); fn["name"] != "get_weather" {
					t.Errorf("tool sent = %v", body.Tools[0])
				}
			} else {
				if n := len(body.Messages); n != 3 {
					t.Fatalf("%d messages sent", n)
				}
				var a, u []map[string]any
				mustUnmarshal(t, body.Messages[1].Content, &a)
				mustUnmarshal(t, body.Messages[2].Content, &u)
				if body.Messages[1].Role != "assistant" || len(a) != 2 || a[1]["type"] != "tool_use" || a[1]["id"] != "toolu_1_0" {
					t.Errorf("assistant turn sent = %v", a)
				}
				if in, ok := a[1]["input"].(map[string]any); !ok || in["city"] != "Paris" {
					t.Errorf("tool_use input sent = %v, want the parsed object", a[1]["input"])
				}
				if body.Messages[2].Role != "user" || len(u) != 1 || u[0]["type"] != "tool_result" || u[0]["tool_use_id"] != "toolu_1_0" {
					t.Errorf("tool result turn sent = %v", u)
				}
				if schema := body.Tools[0]["input_schema"].(map[string]any); schema["type"] != "object" || fmt.Sprint(schema["required"]) != "[city]" {
					t.Errorf("input_schema sent = %v", schema)
				}
			}
		})
	}
}

type chatToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Consecutive tool results must travel as one user message of tool_result
// blocks, followed by any user note, for the Messages API to accept them.
func TestAnthropicMergesToolResults(t *testing.T) {
	srv, base := startServer(t, connectorScript)
	c := flavour{"anthropic", false}.connect(t, base, 0)
	msgs := []trajectory.Message{
		{Role: trajectory.RoleUser, Content: "Compare two cities."},
		{Role: trajectory.RoleAssistant, ToolCalls: []trajectory.ToolCall{
			{ID: "toolu_a", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)},
			{ID: "toolu_b", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Rome"}`)},
		}},
		{Role: trajectory.RoleTool, ToolCallID: "toolu_a", Content: "cold"},
		{Role: trajectory.RoleTool, ToolCallID: "toolu_b", Content: "warm"},
		{Role: trajectory.RoleUser, Content: "Be brief."},
	}
	if _, err := c.Chat(context.Background(), model.Request{Messages: msgs, Tools: []model.Tool{weatherTool}}); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	mustUnmarshal(t, srv.Requests()[0].Body, &body)
	if len(body.Messages) != 3 {
		t.Fatalf("sent %d messages, want 3 (user, assistant, user): %+v", len(body.Messages), body.Messages)
	}
	last := body.Messages[2]
	var types []string
	for _, b := range last.Content {
		types = append(types, fmt.Sprint(b["type"]))
	}
	if last.Role != "user" || strings.Join(types, ",") != "tool_result,tool_result,text" {
		t.Fatalf("last turn = %s %v", last.Role, types)
	}
	if last.Content[0]["tool_use_id"] != "toolu_a" || last.Content[1]["tool_use_id"] != "toolu_b" {
		t.Errorf("tool results out of order: %v", last.Content)
	}
}

func TestConnectorUsageFromScript(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			_, base := startServer(t, connectorScript)
			resp, err := f.connect(t, base, 0).Chat(context.Background(), model.Request{
				Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "a counted question"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Usage != (trajectory.Usage{InputTokens: 123, OutputTokens: 45}) {
				t.Fatalf("usage = %+v, want 123/45", resp.Usage)
			}
		})
	}
}

func TestConnectorRetriesThenSucceeds(t *testing.T) {
	for _, f := range flavours {
		for _, tc := range []struct{ prompt, want string }{
			{"ratelimit me", "answered after a 429"},
			{"flaky service", "answered after a 500"},
		} {
			t.Run(f.String()+"/"+tc.prompt, func(t *testing.T) {
				srv, base := startServer(t, connectorScript)
				resp, err := f.connect(t, base, 2).Chat(context.Background(), model.Request{
					Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: tc.prompt}},
				})
				if err != nil {
					t.Fatal(err)
				}
				if resp.Message.Content != tc.want {
					t.Fatalf("content = %q, want %q", resp.Message.Content, tc.want)
				}
				if n := len(srv.Requests()); n != 2 {
					t.Fatalf("server saw %d requests, want 2 (failure, retry)", n)
				}
			})
		}
	}
}

func TestConnectorPersistentFailure(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			// A provider that is down: every request fails. Retry-After: 0
			// keeps the test quick; backoff itself is covered above.
			var hits atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"type":"error","error":{"type":"api_error","message":"backend down"}}`)
			})}
			go func() { _ = hs.Serve(ln) }()
			t.Cleanup(func() { _ = hs.Close() })

			_, err = f.connect(t, "http://"+ln.Addr().String(), 3).Chat(context.Background(), model.Request{
				Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "hi"}},
			})
			if err == nil {
				t.Fatal("want an error from a server that always fails")
			}
			if hits.Load() != 4 {
				t.Errorf("server saw %d requests, want 4 (1 + 3 retries)", hits.Load())
			}
			for _, want := range []string{"after 3 retries", "500", "test-model"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestMissingAPIKey(t *testing.T) {
	for _, tc := range []struct {
		ref  spec.ModelRef
		want string
	}{
		{spec.ModelRef{Connector: "openai", Model: "gpt-4o"}, "OPENAI_API_KEY"},
		{spec.ModelRef{Connector: "anthropic", Model: "claude-sonnet-4"}, "ANTHROPIC_API_KEY"},
		{spec.ModelRef{Connector: "openai", Model: "m", APIKeyEnv: "MY_GATEWAY_KEY"}, "MY_GATEWAY_KEY"},
	} {
		_, err := model.New(tc.ref, model.Options{Getenv: env(nil)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "not set") {
			t.Errorf("New(%s) error = %v, want it to name %s", tc.ref.Connector, err, tc.want)
		}
	}
	// The named variable is the one read.
	if _, err := model.New(spec.ModelRef{Connector: "openai", Model: "m", APIKeyEnv: "K"}, model.Options{Getenv: env(map[string]string{"K": "v"})}); err != nil {
		t.Errorf("with K set: %v", err)
	}
}

func TestNewRejectsUnknownConnector(t *testing.T) {
	for _, c := range []string{"", "gemini"} {
		if _, err := model.New(spec.ModelRef{Connector: c}, model.Options{}); err == nil || !strings.Contains(err.Error(), "openai, anthropic or scripted") {
			t.Errorf("connector %q: error = %v", c, err)
		}
	}
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	mustUnmarshal(t, b, &v)
	out, _ := json.Marshal(v)
	return string(out)
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

func TestRetryAttemptsLoggedWithoutKey(t *testing.T) {
	_, base := startServer(t, connectorScript)
	var buf bytes.Buffer
	retries := 2
	c, err := model.New(spec.ModelRef{Connector: "openai", Model: "m", BaseURL: base + "/v1", MaxRetries: &retries}, model.Options{
		Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-very-secret"}),
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat(context.Background(), model.Request{Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "ratelimit"}}}); err != nil {
		t.Fatal(err)
	}
	logs := buf.String()
	if !strings.Contains(logs, `msg="retrying openai in about`) || !strings.Contains(logs, "(attempt 2/3): HTTP 429 Too Many Requests") {
		t.Errorf("the retry after the 429 was not logged: %s", logs)
	}
	if strings.Contains(logs, "sk-very-secret") {
		t.Errorf("the API key leaked into the logs: %s", logs)
	}
}

// ModelRef.Timeout bounds a call against a server that never answers.
func TestConnectorTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			zero := 0
			ref := spec.ModelRef{Connector: f.connector, Model: "m", BaseURL: f.baseURL("http://" + ln.Addr().String()),
				MaxRetries: &zero, Timeout: spec.Duration(200 * time.Millisecond)}
			c, err := model.New(ref, model.Options{Getenv: env(map[string]string{"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}), Stream: f.stream})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Chat(context.Background(), model.Request{Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "hi"}}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error = %v, want a deadline error", err)
			}
		})
	}
}

// A provider that refuses connections: one Warn line per retry the SDK
// makes, each with its wait and root cause, and the call's error once (no
// line for the last attempt, whose failure the caller reports).
func TestRetryRoundsAgainstClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			retries := 2
			ref := spec.ModelRef{Connector: f.connector, Model: "test-model", BaseURL: f.baseURL(closed), MaxRetries: &retries}
			c, err := model.New(ref, model.Options{
				Getenv: env(map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}),
				Stream: f.stream,
				// The CLI's level: Warn and above.
				Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Chat(context.Background(), model.Request{Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: "hi"}}})
			if err == nil || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("error = %v, want connection refused", err)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			want := []string{
				fmt.Sprintf(`level=WARN msg="retrying %s in about 500ms (attempt 2/3): connection refused"`, f.connector),
				fmt.Sprintf(`level=WARN msg="retrying %s in about 1s (attempt 3/3): connection refused"`, f.connector),
			}
			if len(lines) != len(want) {
				t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), buf.String())
			}
			for i, w := range want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d = %s\nwant it to contain %s", i+1, lines[i], w)
				}
			}
		})
	}
}

package modelserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"evals.si/modelserver"
)

const script = `
records:
  rec-7:
    - content: record seven
rules:
  - contains: run ls
    replies:
      - tool_calls:
          - name: shell
            arguments: {command: ls -la}
      - content: The directory holds two files.
  - contains: throttle
    replies:
      - status: 429
        content: fine now
default:
  - content: default answer
`

func start(t *testing.T) (*modelserver.Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := modelserver.LoadScript(path)
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

func post(t *testing.T, url string, body any, header ...string) (*http.Response, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

type event struct {
	Name string
	Data map[string]any
}

// readSSE parses a server-sent event stream; data-only events have no name.
func readSSE(t *testing.T, body []byte) []event {
	t.Helper()
	var out []event
	var cur event
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if data == "[DONE]" {
				cur.Data = map[string]any{"done": true}
			} else if err := json.Unmarshal([]byte(data), &cur.Data); err != nil {
				t.Fatalf("bad event data %q: %v", data, err)
			}
		case line == "":
			if cur.Data != nil {
				out = append(out, cur)
			}
			cur = event{}
		}
	}
	return out
}

func names(evs []event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	return out
}

// The Responses API round trip over raw HTTP: a function call, then its
// output sent with previous_response_id only, then the final answer.
func TestResponsesPreviousResponseID(t *testing.T) {
	_, base := start(t)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[stream], func(t *testing.T) {
			first := func(body []byte) map[string]any {
				if !stream {
					var r map[string]any
					if err := json.Unmarshal(body, &r); err != nil {
						t.Fatal(err)
					}
					return r
				}
				evs := readSSE(t, body)
				last := evs[len(evs)-1]
				if last.Name != "response.completed" {
					t.Fatalf("last event %q", last.Name)
				}
				return last.Data["response"].(map[string]any)
			}
			tools := []any{map[string]any{"type": "function", "name": "shell", "parameters": map[string]any{"type": "object"}}}
			resp, body := post(t, base+"/v1/responses", map[string]any{"model": "m", "input": "please run ls", "tools": tools, "stream": stream})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			r1 := first(body)
			out := r1["output"].([]any)
			if len(out) != 1 {
				t.Fatalf("output = %v", out)
			}
			fc := out[0].(map[string]any)
			if fc["type"] != "function_call" || fc["name"] != "shell" || fc["call_id"] != "call_1_0" || fc["arguments"] != `{"command":"ls -la"}` {
				t.Fatalf("function call item = %v", fc)
			}
			if u := r1["usage"].(map[string]any); u["output_tokens"].(float64) < 1 || r1["status"] != "completed" {
				t.Fatalf("response = %v", r1)
			}

			resp, body = post(t, base+"/v1/responses", map[string]any{
				"model": "m", "previous_response_id": r1["id"], "stream": stream,
				"input": []any{map[string]any{"type": "function_call_output", "call_id": "call_1_0", "output": "a.txt b.txt"}},
			})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			r2 := first(body)
			msg := r2["output"].([]any)[0].(map[string]any)
			text := msg["content"].([]any)[0].(map[string]any)
			if msg["type"] != "message" || msg["role"] != "assistant" || text["type"] != "output_text" || text["text"] != "The directory holds two files." {
				t.Fatalf("second output = %v", r2["output"])
			}
			if r2["previous_response_id"] != r1["id"] {
				t.Errorf("previous_response_id = %v", r2["previous_response_id"])
			}
		})
	}

	resp, body := post(t, base+"/v1/responses", map[string]any{"model": "m", "input": "x", "previous_response_id": "resp_nope"})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "previous_response_not_found") {
		t.Errorf("unknown previous id: %d %s", resp.StatusCode, body)
	}
}

func TestResponsesStreamEvents(t *testing.T) {
	_, base := start(t)
	// The second turn of a stateless conversation (history re-sent, as
	// Codex does with store: false) is a text message.
	_, body := post(t, base+"/responses", map[string]any{
		"model": "m", "stream": true, "store": false,
		"input": []any{
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "run ls"}}},
			map[string]any{"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
			map[string]any{"type": "function_call_output", "call_id": "c1", "output": "x"},
		},
	})
	evs := readSSE(t, body)
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.completed",
	}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v\nwant     %v", got, want)
	}
	var text string
	for i, e := range evs {
		if e.Data["type"] != e.Name || e.Data["sequence_number"].(float64) != float64(i) {
			t.Errorf("event %d: type %v, sequence_number %v", i, e.Data["type"], e.Data["sequence_number"])
		}
		if e.Name == "response.output_text.delta" {
			text += e.Data["delta"].(string)
		}
	}
	if text != "The directory holds two files." {
		t.Errorf("deltas = %q", text)
	}

	// A function call streams its arguments.
	_, body = post(t, base+"/v1/responses", map[string]any{"model": "m", "stream": true, "input": "run ls now"})
	evs = readSSE(t, body)
	want = []string{
		"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed",
	}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v\nwant     %v", got, want)
	}
	if done := evs[5].Data; done["arguments"] != `{"command":"ls -la"}` || done["name"] != "shell" {
		t.Errorf("arguments.done = %v", done)
	}
}

// The official openai-go Responses client against the server, plain and
// streaming, continuing with previous_response_id.
func TestResponsesWithOpenAIClient(t *testing.T) {
	_, base := start(t)
	svc := responses.NewResponseService(option.WithBaseURL(base+"/v1"), option.WithAPIKey("sk-test"), option.WithHTTPClient(&http.Client{}), option.WithMaxRetries(0))
	ctx := context.Background()

	r1, err := svc.New(ctx, responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run ls here")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" || r1.Output[0].CallID != "call_1_0" || r1.Output[0].Arguments.OfString != `{"command":"ls -la"}` {
		t.Fatalf("output = %s", r1.RawJSON())
	}
	if r1.Usage.InputTokens < 1 || r1.Usage.TotalTokens != r1.Usage.InputTokens+r1.Usage.OutputTokens {
		t.Errorf("usage = %+v", r1.Usage)
	}

	out := responses.ResponseInputItemParamOfFunctionCallOutput("a.txt b.txt")
	out.OfFunctionCallOutput.CallID = openai.String("call_1_0")
	stream := svc.NewStreaming(ctx, responses.ResponseNewParams{
		Model:              "m",
		PreviousResponseID: openai.String(r1.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}},
	})
	var final responses.Response
	var deltas string
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if final.OutputText() != "The directory holds two files." || deltas != final.OutputText() {
		t.Fatalf("final text %q, deltas %q", final.OutputText(), deltas)
	}
}

// Claude Code's request shape: POST /v1/messages?beta=true with stream.
func TestMessagesStreamEvents(t *testing.T) {
	srv, base := start(t)
	_, body := post(t, base+"/v1/messages?beta=true", map[string]any{
		"model": "claude-x", "max_tokens": 100, "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
			map[string]any{"type": "text", "text": "please run ls"},
		}}},
	}, "anthropic-version", "2023-06-01", "x-api-key", "secret")
	evs := readSSE(t, body)
	want := []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events = %v\nwant     %v", got, want)
	}
	cb := evs[2].Data["content_block"].(map[string]any)
	if cb["type"] != "tool_use" || cb["id"] != "toolu_1_0" || cb["name"] != "shell" {
		t.Errorf("content_block_start = %v", cb)
	}
	var partial string
	for _, e := range evs[3:5] {
		d := e.Data["delta"].(map[string]any)
		if d["type"] != "input_json_delta" {
			t.Errorf("delta = %v", d)
		}
		partial += d["partial_json"].(string)
	}
	if partial != `{"command":"ls -la"}` {
		t.Errorf("input json = %q", partial)
	}
	md := evs[6].Data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"].(float64) < 1 {
		t.Errorf("message_delta = %v", md)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/messages" || reqs[0].Query != "beta=true" || reqs[0].Model != "claude-x" || !reqs[0].Stream {
		t.Fatalf("recorded %+v", reqs)
	}
	if reqs[0].Header.Get("X-Api-Key") != "REDACTED" {
		t.Errorf("x-api-key recorded as %q", reqs[0].Header.Get("X-Api-Key"))
	}

	// Once the tool result is in, a text block ends the turn.
	_, body = post(t, base+"/v1/messages", map[string]any{
		"model": "claude-x", "max_tokens": 100, "stream": true,
		"messages": []any{
			map[string]any{"role": "user", "content": "please run ls"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1_0", "name": "shell", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1_0", "content": "a b"}}},
		},
	})
	evs = readSSE(t, body)
	var text string
	for _, e := range evs {
		if e.Name == "content_block_delta" {
			text += e.Data["delta"].(map[string]any)["text"].(string)
		}
		if e.Name == "message_delta" && e.Data["delta"].(map[string]any)["stop_reason"] != "end_turn" {
			t.Errorf("stop reason = %v", e.Data)
		}
	}
	if text != "The directory holds two files." {
		t.Errorf("text = %q", text)
	}
}

func TestChatCompletionsStreamChunks(t *testing.T) {
	_, base := start(t)
	_, body := post(t, base+"/chat/completions", map[string]any{
		"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []any{map[string]any{"role": "user", "content": "run ls"}},
	})
	evs := readSSE(t, body)
	if len(evs) < 4 || evs[len(evs)-1].Data["done"] != true {
		t.Fatalf("events = %v", evs)
	}
	usage := evs[len(evs)-2].Data
	if len(usage["choices"].([]any)) != 0 || usage["usage"].(map[string]any)["total_tokens"].(float64) < 2 {
		t.Errorf("usage chunk = %v", usage)
	}
	var args, finish string
	for _, e := range evs[:len(evs)-2] {
		ch := e.Data["choices"].([]any)[0].(map[string]any)
		if f, ok := ch["finish_reason"].(string); ok {
			finish = f
		}
		if tcs, ok := ch["delta"].(map[string]any)["tool_calls"].([]any); ok {
			args += tcs[0].(map[string]any)["function"].(map[string]any)["arguments"].(string)
		}
	}
	if args != `{"command":"ls -la"}` || finish != "tool_calls" {
		t.Errorf("arguments %q, finish %q", args, finish)
	}
}

func TestStatusOncePerBodyAndRecordHeader(t *testing.T) {
	srv, base := start(t)
	req := map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "please throttle"}}}
	resp, body := post(t, base+"/v1/chat/completions", req)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "0" || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("first: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post(t, base+"/v1/chat/completions", req)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "fine now") {
		t.Fatalf("retry: %d %s", resp.StatusCode, body)
	}
	// Anthropic's error shape for the same scripted status on its route.
	resp, body = post(t, base+"/v1/messages", map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "throttle"}}})
	if resp.StatusCode != 429 || !strings.Contains(string(body), `"rate_limit_error"`) {
		t.Fatalf("anthropic 429: %d %s", resp.StatusCode, body)
	}

	resp, body = post(t, base+"/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, modelserver.RecordHeader, "rec-7")
	if resp.StatusCode != 200 || !strings.Contains(string(body), "record seven") {
		t.Fatalf("record header: %d %s", resp.StatusCode, body)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("recorded %d requests, want 4", n)
	}
}

func TestRoutes(t *testing.T) {
	_, base := start(t)
	resp, body := post(t, base+"/v1/embeddings", map[string]any{"model": "m"})
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error.Message, "/v1/chat/completions") {
		t.Errorf("unknown route: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{"/v1/models", "/models"} {
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !strings.Contains(string(b), `"scripted"`) {
			t.Errorf("GET %s: %d %s", path, r.StatusCode, b)
		}
	}
	r, err := http.Get(base + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 405 {
		t.Errorf("GET chat completions: %d", r.StatusCode)
	}
	resp, body = post(t, base+"/v1/chat/completions", map[string]any{"model": "m"})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "messages") {
		t.Errorf("no messages: %d %s", resp.StatusCode, body)
	}
}

package modelserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Agent CLIs open with user messages of their own before the task (Codex:
// an <environment_context> message; Claude Code: a <system-reminder> part
// and a second user message in some sessions). Rules match every user
// message before the first assistant turn, and only those.
func TestRulesMatchTheOpeningUserMessages(t *testing.T) {
	_, base := start(t)
	envCtx := map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "<environment_context>\n  <cwd>/workspace</cwd>\n</environment_context>"}}}
	task := map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "please run ls"}}}
	call := map[string]any{"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}
	output := map[string]any{"type": "function_call_output", "call_id": "c1", "output": "a b"}
	later := map[string]any{"type": "message", "role": "user", "content": "now run ls again"}
	for name, tc := range map[string]struct {
		input []any
		want  string
	}{
		"task after environment context":  {[]any{envCtx, task}, `"name":"shell"`},
		"second turn":                     {[]any{envCtx, task, call, output}, "The directory holds two files."},
		"task only after the first reply": {[]any{envCtx, call, output, later}, "default answer"},
	} {
		t.Run("responses/"+name, func(t *testing.T) {
			resp, body := post(t, base+"/v1/responses", map[string]any{"model": "m", "input": tc.input, "store": false})
			if resp.StatusCode != 200 || !strings.Contains(string(body), tc.want) {
				t.Fatalf("status %d, want %s in %s", resp.StatusCode, tc.want, body)
			}
		})
	}

	msgs := []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>context</system-reminder>"},
		}},
		map[string]any{"role": "user", "content": "please run ls"},
	}
	resp, body := post(t, base+"/v1/messages?beta=true", map[string]any{"model": "m", "max_tokens": 100, "messages": msgs}, "anthropic-version", "2023-06-01")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"tool_use"`) {
		t.Fatalf("messages: status %d, want the rule's tool call in %s", resp.StatusCode, body)
	}
}

func TestDumpWritesEachRequest(t *testing.T) {
	srv, base := start(t)
	dir := filepath.Join(t.TempDir(), "dump")
	if err := srv.DumpTo(dir); err != nil {
		t.Fatal(err)
	}
	post(t, base+"/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, "Authorization", "Bearer sk-secret")
	post(t, base+"/v1/messages?beta=true", map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, "X-Api-Key", "sk-secret", "anthropic-version", "2023-06-01")

	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0001-v1-chat-completions.json", "0002-v1-messages.json"}
	if len(names) != len(want) {
		t.Fatalf("dump holds %v, want %v", names, want)
	}
	for i, n := range names {
		if filepath.Base(n) != want[i] {
			t.Errorf("file %d = %s, want %s", i, filepath.Base(n), want[i])
		}
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "sk-secret") {
			t.Errorf("%s holds the credential: %s", n, b)
		}
		var d struct {
			Method, Path, Query string
			Header              map[string][]string
			Body                struct {
				Model string `json:"model"`
			}
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if d.Method != "POST" || d.Body.Model != "m" {
			t.Errorf("%s = %+v", n, d)
		}
		if i == 1 && (d.Query != "beta=true" || d.Header["X-Api-Key"][0] != "REDACTED") {
			t.Errorf("%s: query %q, X-Api-Key %v", n, d.Query, d.Header["X-Api-Key"])
		}
	}
}

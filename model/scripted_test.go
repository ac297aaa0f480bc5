package model_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

const selectionScript = `
records:
  rec-1/2:
    - content: trial two of record one
  rec-1:
    - content: record first
    - content: record second
      tool_calls:
        - name: bash
          arguments: '{"command": "ls"}'
        - name: read_file
          arguments: {path: a.txt}
rules:
  - contains: fix the bug
    replies:
      - content: rule reply
default:
  - content: default one
  - content: default two
    input_tokens: 7
  - content: default last
`

func scriptedConnector(t *testing.T) model.Connector {
	t.Helper()
	s, err := model.ParseScript([]byte(selectionScript))
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.New(spec.ModelRef{Connector: "scripted", Script: s}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// conv builds a conversation with the given first user text and n earlier
// assistant turns.
func conv(first string, n int) []trajectory.Message {
	msgs := []trajectory.Message{{Role: trajectory.RoleUser, Content: first}}
	for i := range n {
		msgs = append(msgs,
			trajectory.Message{Role: trajectory.RoleAssistant, Content: fmt.Sprintf("turn %d", i)},
			trajectory.Message{Role: trajectory.RoleUser, Content: "go on"})
	}
	return msgs
}

func TestScriptedSelection(t *testing.T) {
	c := scriptedConnector(t)
	for _, tc := range []struct {
		name   string
		record string
		first  string
		turns  int
		want   string
	}{
		{"record first", "rec-1", "fix the bug please", 0, "record first"},
		{"record wins over rule", "rec-1", "fix the bug please", 0, "record first"},
		{"record index", "rec-1", "anything", 1, "record second"},
		{"record last repeats", "rec-1", "anything", 5, "record second"},
		{"unknown record falls to rule", "rec-9", "please fix the bug now", 0, "rule reply"},
		{"rule", "", "please fix the bug now", 0, "rule reply"},
		{"rule last repeats", "", "please fix the bug now", 3, "rule reply"},
		{"rule is case-sensitive", "", "Fix The Bug", 0, "default one"},
		{"default", "", "hello", 0, "default one"},
		{"default index", "", "hello", 1, "default two"},
		{"default last", "", "hello", 2, "default last"},
		{"default last repeats", "", "hello", 9, "default last"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Chat(context.Background(), model.Request{RecordID: tc.record, Messages: conv(tc.first, tc.turns)})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != tc.want {
				t.Fatalf("content = %q, want %q", resp.Message.Content, tc.want)
			}
		})
	}
}

func TestScriptedTrialEntry(t *testing.T) {
	c := scriptedConnector(t)
	for trial, want := range map[int]string{0: "record first", 1: "record first", 2: "trial two of record one"} {
		resp, err := c.Chat(context.Background(), model.Request{RecordID: "rec-1", Trial: trial, Messages: conv("x", 0)})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != want {
			t.Errorf("trial %d: %q, want %q", trial, resp.Message.Content, want)
		}
	}
}

func TestScriptedToolCallsAndUsage(t *testing.T) {
	c := scriptedConnector(t)
	resp, err := c.Chat(context.Background(), model.Request{RecordID: "rec-1", Messages: conv("x", 1)})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls
	if len(calls) != 2 || resp.StopReason != "tool_use" {
		t.Fatalf("response = %+v", resp)
	}
	// Step 2 (one assistant turn before): ids call_2_0, call_2_1. A quoted
	// JSON string of arguments is unwrapped.
	if calls[0].ID != "call_2_0" || calls[0].Name != "bash" || compactJSON(t, calls[0].Arguments) != `{"command":"ls"}` {
		t.Errorf("call 0 = %+v (%s)", calls[0], calls[0].Arguments)
	}
	if calls[1].ID != "call_2_1" || compactJSON(t, calls[1].Arguments) != `{"path":"a.txt"}` {
		t.Errorf("call 1 = %+v (%s)", calls[1], calls[1].Arguments)
	}
	if resp.Model != model.ScriptedModel {
		t.Errorf("model = %q", resp.Model)
	}

	// Usage: the estimate is a quarter of the characters, at least 1; a
	// reply's token counts override it.
	resp, err = c.Chat(context.Background(), model.Request{System: strings.Repeat("s", 40), Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: strings.Repeat("u", 40)}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (trajectory.Usage{InputTokens: 20, OutputTokens: len("default one") / 4}); resp.Usage != want {
		t.Errorf("usage = %+v, want %+v", resp.Usage, want)
	}
	resp, err = c.Chat(context.Background(), model.Request{Messages: conv("", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "default two" || resp.Usage.InputTokens != 7 {
		t.Errorf("overridden usage = %+v (%q)", resp.Usage, resp.Message.Content)
	}
	if model.EstimateTokens(0) != 1 || model.EstimateTokens(3) != 1 || model.EstimateTokens(400) != 100 {
		t.Error("EstimateTokens is not max(1, chars/4)")
	}
}

// Replies depend only on the conversation, so any interleaving of calls
// gives the same answers.
func TestScriptedDeterministicUnderConcurrency(t *testing.T) {
	c := scriptedConnector(t)
	type call struct {
		record, first string
		turns         int
	}
	var calls []call
	for i := range 60 {
		calls = append(calls, call{[]string{"", "rec-1", "zzz"}[i%3], []string{"hello", "fix the bug x"}[i%2], i % 4})
	}
	want := make([]string, len(calls))
	for i, cl := range calls {
		r, err := c.Chat(context.Background(), model.Request{RecordID: cl.record, Messages: conv(cl.first, cl.turns)})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = r.Message.Content
	}
	for range 5 {
		got := make([]string, len(calls))
		var wg sync.WaitGroup
		for i, cl := range calls {
			wg.Go(func() {
				r, err := c.Chat(context.Background(), model.Request{RecordID: cl.record, Messages: conv(cl.first, cl.turns)})
				if err != nil {
					got[i] = err.Error()
					return
				}
				got[i] = r.Message.Content
			})
		}
		wg.Wait()
		for i := range calls {
			if got[i] != want[i] {
				t.Fatalf("call %d (%+v) = %q concurrently, %q sequentially", i, calls[i], got[i], want[i])
			}
		}
	}
}

func TestScriptedErrors(t *testing.T) {
	if _, err := model.New(spec.ModelRef{Connector: "scripted"}, model.Options{}); err == nil || !strings.Contains(err.Error(), "script or script_file") {
		t.Errorf("no script: %v", err)
	}
	// No reply anywhere for this conversation.
	c, err := model.New(spec.ModelRef{Connector: "scripted", Script: &spec.Script{Rules: []spec.ScriptRule{{Contains: "x", Replies: []spec.ScriptReply{{Content: "y"}}}}}}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Chat(context.Background(), model.Request{Messages: conv("nothing matches", 0)}); err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("unmatched: %v", err)
	}
	for _, bad := range []string{"defualt: [{content: x}]", "{}", "default: [{content: x, tool_calls: [{nmae: y}]}]", "default: ["} {
		if _, err := model.ParseScript([]byte(bad)); err == nil {
			t.Errorf("ParseScript(%q) accepted a bad script", bad)
		}
	}
}

func TestScriptFileRelativeToBaseDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "s.yaml"), []byte("default: [{content: from the file}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := model.New(spec.ModelRef{Connector: "scripted", Model: "fake-1", ScriptFile: "scripts/s.yaml"}, model.Options{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Chat(context.Background(), model.Request{Messages: conv("hi", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "from the file" || resp.Model != "fake-1" {
		t.Fatalf("response = %+v", resp)
	}
	if _, err := model.New(spec.ModelRef{Connector: "scripted", ScriptFile: "missing.yaml"}, model.Options{BaseDir: dir}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

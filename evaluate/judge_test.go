package evaluate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"evals.si/spec"
	"evals.si/trajectory"
)

func TestParseVerdict01(t *testing.T) {
	tests := []struct {
		name      string
		reply     string
		score     float64
		reasoning string
		wantErr   string
	}{
		{"bare", `{"reasoning": "right", "score": 0.8}`, 0.8, "right", ""},
		{"fenced", "Here is my grade:\n```json\n{\"score\": 1, \"reasoning\": \"ok\"}\n```\nThanks.", 1, "ok", ""},
		{"in prose", `I think {this} is fine. {"reasoning": "partial", "score": 0.5} done`, 0.5, "partial", ""},
		{"string score", `{"score": "0.25", "reason": "meh"}`, 0.25, "meh", ""},
		{"nested braces in reasoning", `{"reasoning": "uses {x} well", "score": 0}`, 0, "uses {x} well", ""},
		{"example then answer", `Format is {"score": 7}. Answer: {"score": 0.9, "reasoning": "good"}`, 0.9, "good", ""},
		{"out of range", `{"score": 4, "reasoning": "good"}`, 0, "", "score 4 is outside 0..1"},
		{"not a number", `{"score": "high"}`, 0, "", `the "score" field: "high" is not a number`},
		{"no score", `{"grade": 1}`, 0, "", `no JSON object with a "score" field`},
		{"no json", `It is correct.`, 0, "", `no JSON object with a "score" field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := parseVerdict01(tt.reply)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Score != tt.score || v.Reasoning != tt.reasoning {
				t.Errorf("got %+v, want score %v reasoning %q", v, tt.score, tt.reasoning)
			}
		})
	}
}

func TestLLMJudge(t *testing.T) {
	tests := []struct {
		name      string
		replies   []string
		threshold *float64
		want      float64
		wantPass  *bool
		calls     int
		wantErr   string
	}{
		{"valid first time", []string{`{"reasoning": "matches the reference", "score": 0.9}`}, nil, 0.9, nil, 1, ""},
		{"threshold pass", []string{`{"reasoning": "ok", "score": 0.7}`}, ptr(0.7), 0.7, ptr(true), 1, ""},
		{"threshold fail", []string{`{"reasoning": "weak", "score": 0.3}`}, ptr(0.5), 0.3, ptr(false), 1, ""},
		{"invalid then valid", []string{"It looks right to me.", `{"reasoning": "fine", "score": 1}`}, nil, 1, nil, 2, ""},
		{"out of range twice then valid", []string{`{"score": 5}`, `{"score": 5}`, `{"score": 0.6, "reasoning": "x"}`}, nil, 0.6, nil, 3, ""},
		{"permanently invalid", []string{"Great answer!"}, nil, 0, nil, 3, `llm-judge: the judge gave no usable reply for record "r1" in 3 attempts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			judge := &fakeJudge{replies: tt.replies}
			ev, err := New(spec.Evaluator{Name: LLMJudge, Rubric: "Names the capital.", Threshold: tt.threshold}, judge)
			if err != nil {
				t.Fatal(err)
			}
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r1", "Capital of France?", "Paris"), Output: "Paris"})
			if judge.calls() != tt.calls {
				t.Errorf("judge called %d times, want %d", judge.calls(), tt.calls)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(scores) != 1 || scores[0].Name != "llm-judge" || scores[0].Value != tt.want {
				t.Fatalf("scores = %+v, want llm-judge %v", scores, tt.want)
			}
			var d struct {
				Reasoning string    `json:"reasoning"`
				Pass      *bool     `json:"pass"`
				Judge     judgeCall `json:"judge"`
			}
			if err := json.Unmarshal(scores[0].Details, &d); err != nil {
				t.Fatal(err)
			}
			if d.Reasoning == "" {
				t.Error("details carry no reasoning")
			}
			if (d.Pass == nil) != (tt.wantPass == nil) || (d.Pass != nil && *d.Pass != *tt.wantPass) {
				t.Errorf("pass = %v, want %v", d.Pass, tt.wantPass)
			}
			if d.Judge.Attempts != tt.calls || d.Judge.Usage.InputTokens != 100*tt.calls || d.Judge.Model != "fake-judge" {
				t.Errorf("judge details = %+v", d.Judge)
			}
		})
	}
}

func TestLLMJudgePrompt(t *testing.T) {
	judge := &fakeJudge{replies: []string{"no json here", `{"score": 1, "reasoning": "ok"}`}}
	ev, _ := New(spec.Evaluator{Name: LLMJudge, Rubric: "Must name the capital city."}, judge)
	tr := Trial{Record: record("rec-7", "Capital of France?", "Paris"), Output: "The capital is Paris."}
	if _, err := ev.Evaluate(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	first := judge.reqs[0]
	user := first.Messages[0].Content
	for _, want := range []string{"Evaluator: llm-judge", "Capital of France?", "Paris", "Must name the capital city.", "The capital is Paris."} {
		if !strings.Contains(user, want) {
			t.Errorf("prompt lacks %q:\n%s", want, user)
		}
	}
	if !strings.HasPrefix(user, "Evaluator: llm-judge\n") {
		t.Errorf("prompt does not start with the evaluator line: %q", user[:40])
	}
	if first.RecordID != "rec-7" || !strings.Contains(first.System, `"score"`) {
		t.Errorf("request = %+v", first)
	}
	// The retry shows the judge its unusable reply and what was wrong.
	retry := judge.reqs[1].Messages
	if len(retry) != 3 || retry[1].Role != trajectory.RoleAssistant || retry[1].Content != "no json here" ||
		!strings.Contains(retry[2].Content, `no JSON object with a "score" field`) {
		t.Errorf("retry conversation = %+v", retry)
	}
	// Without a rubric the default one is used.
	judge2 := &fakeJudge{replies: []string{`{"score": 1}`}}
	ev2, _ := New(spec.Evaluator{Name: LLMJudge}, judge2)
	if _, err := ev2.Evaluate(context.Background(), Trial{Record: record("r", "q", nil), Output: "a"}); err != nil {
		t.Fatal(err)
	}
	if u := judge2.reqs[0].Messages[0].Content; !strings.Contains(u, defaultRubric) || strings.Contains(u, "Reference answer") {
		t.Errorf("prompt without rubric or expected:\n%s", u)
	}
}

func TestJudgeConnectorError(t *testing.T) {
	judge := &fakeJudge{replies: []string{""}, err: errors.New("429 rate limited")}
	ev, _ := New(spec.Evaluator{Name: LLMJudge}, judge)
	_, err := ev.Evaluate(context.Background(), Trial{Record: record("r1", "q", nil), Output: "a"})
	if err == nil || !strings.Contains(err.Error(), `calling the judge model for record "r1": 429 rate limited`) {
		t.Fatalf("error = %v", err)
	}
	if judge.calls() != 1 {
		t.Errorf("a connector error was retried by the evaluator (%d calls); the connector owns transport retries", judge.calls())
	}
}

func TestJudgeCanceled(t *testing.T) {
	judge := &fakeJudge{replies: []string{`{"score": 1}`}}
	ev, _ := New(spec.Evaluator{Name: GoalCompletion}, judge)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ev.Evaluate(ctx, Trial{Record: record("r", "q", nil)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if judge.calls() != 0 {
		t.Error("judge called after cancellation")
	}
}

func agentEvents() []trajectory.Event {
	args := json.RawMessage(`{"command":"pytest -q"}`)
	return []trajectory.Event{
		{Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleSystem, Content: "SYSTEM PROMPT"}},
		{Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: "Fix calc.py"}},
		{Kind: trajectory.KindModelCall, Step: 1, ModelCall: &trajectory.ModelCall{Usage: trajectory.Usage{InputTokens: 1000, OutputTokens: 50}, CostUSD: 0.01}},
		{Kind: trajectory.KindMessage, Step: 1, Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: "Running the tests.", ToolCalls: []trajectory.ToolCall{{ID: "c1", Name: "bash", Arguments: args}}}},
		{Kind: trajectory.KindToolCall, Step: 1, ToolCall: &trajectory.ToolCall{ID: "c1", Name: "bash", Arguments: args}},
		{Kind: trajectory.KindToolResult, Step: 1, ToolResult: &trajectory.ToolResult{CallID: "c1", Name: "bash", Output: "1 failed", IsError: true}},
		{Kind: trajectory.KindPolicy, Step: 1, Policy: &trajectory.Policy{Kind: "network", Host: "pypi.org"}},
		{Kind: trajectory.KindEscalation, Step: 1, Escalation: &trajectory.Escalation{Kind: "network", Reason: "need pip", Granted: false}},
		{Kind: trajectory.KindModelCall, Step: 2, ModelCall: &trajectory.ModelCall{Usage: trajectory.Usage{InputTokens: 1200, OutputTokens: 30}, CostUSD: 0.02}},
		{Kind: trajectory.KindModelCall, Step: 2, ModelCall: &trajectory.ModelCall{Role: "judge", Usage: trajectory.Usage{InputTokens: 9999}}},
		{Kind: trajectory.KindMessage, Step: 2, Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: "Fixed both bugs."}},
		{Kind: trajectory.KindStop, Step: 2, Stop: &trajectory.Stop{Reason: "answered"}},
	}
}

func TestGoalCompletion(t *testing.T) {
	judge := &fakeJudge{replies: []string{"```json\n{\"reasoning\": \"tests pass at the end\", \"score\": 0.75}\n```"}}
	ev, err := New(spec.Evaluator{Name: GoalCompletion, Rubric: "All tests pass.", Threshold: ptr(0.5)}, judge)
	if err != nil {
		t.Fatal(err)
	}
	tr := Trial{Record: record("fix-calc", "Fix the two bugs in calc.py", nil), Output: "Fixed both bugs.", Events: agentEvents(),
		HasDiff: true, Diff: "--- a/calc.py\n+++ b/calc.py\n-return a-b\n+return a+b\n", Agent: true}
	scores, err := ev.Evaluate(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	if got := scoreMap(scores); got["goal-completion"] != 0.75 || len(got) != 1 {
		t.Fatalf("scores = %v", got)
	}
	if !strings.Contains(string(scores[0].Details), `"pass":true`) {
		t.Errorf("details = %s", scores[0].Details)
	}
	user := judge.reqs[0].Messages[0].Content
	for _, want := range []string{"Evaluator: goal-completion", "Fix the two bugs in calc.py", "All tests pass.",
		`[tool call] bash {"command":"pytest -q"}`, "[tool result bash (error)] 1 failed", "[sandbox policy] network pypi.org",
		"[escalation network, denied] need pip", "[stop] answered", "+return a+b", "Fixed both bugs."} {
		if !strings.Contains(user, want) {
			t.Errorf("prompt lacks %q:\n%s", want, user)
		}
	}
	if strings.Contains(user, "SYSTEM PROMPT") {
		t.Error("the agent's system prompt leaked into the transcript")
	}
	if n := strings.Count(user, "[tool call] bash"); n != 1 {
		t.Errorf("tool call rendered %d times, want once", n)
	}
}

func TestGoalCompletionInvalidThenError(t *testing.T) {
	judge := &fakeJudge{replies: []string{`{"score": 2}`, `{"score": -1}`, `{"score": "yes"}`}}
	ev, _ := New(spec.Evaluator{Name: GoalCompletion}, judge)
	_, err := ev.Evaluate(context.Background(), Trial{Record: record("r9", "goal", nil), Agent: true})
	if err == nil || !strings.Contains(err.Error(), `goal-completion: the judge gave no usable reply for record "r9" in 3 attempts; last problem: the "score" field: "yes" is not a number`) {
		t.Fatalf("error = %v", err)
	}
	if !strings.Contains(judge.reqs[1].Messages[2].Content, "score 2 is outside 0..1") {
		t.Errorf("the retry did not say what was wrong: %q", judge.reqs[1].Messages[2].Content)
	}
}

func TestTranscriptBounds(t *testing.T) {
	long := strings.Repeat("é", 5000) // multi-byte, to check cuts stay on rune boundaries
	var events []trajectory.Event
	for range 100 {
		events = append(events, trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{Name: "bash", Output: long}})
	}
	s := cutMiddle(renderTranscript(events), maxTranscriptChars)
	if len(s) > maxTranscriptChars+200 {
		t.Errorf("transcript is %d bytes, bound %d", len(s), maxTranscriptChars)
	}
	if !strings.Contains(s, "bytes of the transcript cut here") || !strings.Contains(s, "bytes cut]") {
		t.Error("cuts are not marked")
	}
	if !utf8.ValidString(s) {
		t.Error("cut produced invalid UTF-8")
	}
	if got := renderTranscript(nil); got != "(no steps were recorded)" {
		t.Errorf("empty transcript = %q", got)
	}
}

func TestTranscriptFromMessagesOnly(t *testing.T) {
	events := []trajectory.Event{{Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleAssistant,
		ToolCalls: []trajectory.ToolCall{{Name: "read_file", Arguments: json.RawMessage(`{"path":"a.py"}`)}}}}}
	if got := renderTranscript(events); !strings.Contains(got, `[tool call] read_file {"path":"a.py"}`) {
		t.Errorf("transcript = %q", got)
	}
}

package evaluate

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"evals.si/spec"
	"evals.si/trajectory"
)

// calls builds a trajectory of tool calls, each with a result; a call is
// "name" or "name|{json args}" or "name|{json args}|result".
func calls(specs ...string) []trajectory.Event {
	var events []trajectory.Event
	for i, s := range specs {
		parts := strings.SplitN(s, "|", 3)
		c := trajectory.ToolCall{ID: "call" + string(rune('a'+i)), Name: parts[0]}
		if len(parts) > 1 {
			c.Arguments = json.RawMessage(parts[1])
		}
		result := "ok"
		if len(parts) > 2 {
			result = parts[2]
		}
		events = append(events,
			trajectory.Event{Kind: trajectory.KindToolCall, ToolCall: &c},
			trajectory.Event{Kind: trajectory.KindToolResult, ToolResult: &trajectory.ToolResult{CallID: c.ID, Name: c.Name, Output: result}},
		)
	}
	return events
}

func withMeta(r spec.Record, key string, v any) spec.Record {
	if r.Metadata == nil {
		r.Metadata = map[string]spec.JSON{}
	}
	r.Metadata[key] = spec.MustJSON(v)
	return r
}

func TestToolCallAccuracy(t *testing.T) {
	tests := []struct {
		name    string
		rec     spec.Record
		events  []trajectory.Event
		p, r    float64
		wantErr string
	}{
		{"perfect from expected", record("r", "q", map[string]any{"tool_calls": []any{"search", map[string]any{"name": "book", "arguments": map[string]any{"id": 7}}}}),
			calls("search|{\"q\":\"x\"}", "book|{\"id\":7,\"seat\":\"12A\"}"), 1, 1, ""},
		{"metadata wins over expected", withMeta(record("r", "q", map[string]any{"tool_calls": []any{"other"}}), "expected_tool_calls", []any{"search"}),
			calls("search"), 1, 1, ""},
		{"argument mismatch", record("r", "q", map[string]any{"tool_calls": []any{map[string]any{"name": "book", "arguments": map[string]any{"id": 7}}}}),
			calls("book|{\"id\":8}"), 0, 0, ""},
		{"arguments as encoded string", record("r", "q", map[string]any{"tool_calls": []any{map[string]any{"name": "book", "arguments": map[string]any{"id": 7, "tags": []any{"a"}}}}}),
			calls(`book|"{\"id\": 7.0, \"tags\": [\"a\"]}"`), 1, 1, ""},
		{"extra and missing", withMeta(record("r", "q", nil), "expected_tool_calls", []any{"a", "b", "c"}),
			calls("a", "b", "x", "y"), 0.5, 2.0 / 3, ""},
		{"multiset counts duplicates", withMeta(record("r", "q", nil), "expected_tool_calls", []any{"a", "a"}),
			calls("a", "a", "a"), 2.0 / 3, 1, ""},
		{"specific expectation keeps its match", withMeta(record("r", "q", nil), "expected_tool_calls", []any{"f", map[string]any{"name": "f", "arguments": map[string]any{"k": 1}}}),
			calls("f|{\"k\":1}", "f|{\"k\":2}"), 1, 1, ""},
		{"nothing expected nothing made", withMeta(record("r", "q", nil), "expected_tool_calls", []any{}), nil, 1, 1, ""},
		{"nothing expected something made", withMeta(record("r", "q", nil), "expected_tool_calls", []any{}), calls("a"), 0, 1, ""},
		{"expected but nothing made", withMeta(record("r", "q", nil), "expected_tool_calls", []any{"a"}), nil, 0, 0, ""},
		{"record lacks expectations", record("rec-9", "q", "plain answer"), calls("a"), 0, 0,
			`record "rec-9" has no expected tool calls, which tool-call-accuracy compares with: add metadata.expected_tool_calls or expected.tool_calls`},
		{"malformed expectation", withMeta(record("rec-3", "q", nil), "expected_tool_calls", []any{map[string]any{"tool": "a"}}), nil, 0, 0,
			`record "rec-3": metadata.expected_tool_calls: an expected call is a tool name or {name, arguments}`},
		{"nameless expectation", withMeta(record("rec-4", "q", nil), "expected_tool_calls", []any{map[string]any{"arguments": map[string]any{}}}), nil, 0, 0,
			"has no tool name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, _ := New(spec.Evaluator{Name: ToolCallAccuracy}, nil)
			scores, err := ev.Evaluate(context.Background(), Trial{Record: tt.rec, Events: tt.events, Agent: true})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := scoreMap(scores)
			f1 := 0.0
			if tt.p+tt.r > 0 {
				f1 = 2 * tt.p * tt.r / (tt.p + tt.r)
			}
			for name, want := range map[string]float64{"tool-call-precision": tt.p, "tool-call-recall": tt.r, "tool-call-f1": f1} {
				if math.Abs(got[name]-want) > 1e-9 {
					t.Errorf("%s = %v, want %v", name, got[name], want)
				}
			}
		})
	}
}

func TestToolCallAccuracyFromMessages(t *testing.T) {
	events := []trajectory.Event{{Kind: trajectory.KindMessage, Message: &trajectory.Message{Role: trajectory.RoleAssistant,
		ToolCalls: []trajectory.ToolCall{{Name: "search"}, {Name: "book"}}}}}
	ev, _ := New(spec.Evaluator{Name: ToolCallAccuracy}, nil)
	scores, err := ev.Evaluate(context.Background(), Trial{Record: withMeta(record("r", "q", nil), "expected_tool_calls", []any{"book"}), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if got := scoreMap(scores); got["tool-call-precision"] != 0.5 || got["tool-call-recall"] != 1 {
		t.Errorf("scores = %v", got)
	}
	if d := string(scores[0].Details); !strings.Contains(d, `"unexpected":["search"]`) {
		t.Errorf("details = %s", d)
	}
}

func TestTrajectoryMatch(t *testing.T) {
	want := []any{"search", map[string]any{"name": "book", "arguments": map[string]any{"id": 7}}, "confirm"}
	tests := []struct {
		name   string
		events []trajectory.Event
		modes  map[string]float64 // mode → expected trajectory-match
	}{
		{"identical", calls("search", `book|{"id":7}`, "confirm"),
			map[string]float64{ModeExact: 1, ModeInOrder: 1, ModeAnyOrder: 1, ModeSubset: 1}},
		{"extra call between", calls("search", "lookup", `book|{"id":7}`, "confirm"),
			map[string]float64{ModeExact: 0, ModeInOrder: 1, ModeAnyOrder: 1, ModeSubset: 0}},
		{"reordered", calls(`book|{"id":7}`, "search", "confirm"),
			map[string]float64{ModeExact: 0, ModeInOrder: 0, ModeAnyOrder: 1, ModeSubset: 1}},
		{"missing one", calls("search", "confirm"),
			map[string]float64{ModeExact: 0, ModeInOrder: 0, ModeAnyOrder: 0, ModeSubset: 1}},
		{"wrong arguments", calls("search", `book|{"id":8}`, "confirm"),
			map[string]float64{ModeExact: 0, ModeInOrder: 0, ModeAnyOrder: 0, ModeSubset: 0}},
		{"nothing made", nil,
			map[string]float64{ModeExact: 0, ModeInOrder: 0, ModeAnyOrder: 0, ModeSubset: 1}},
		{"duplicate call", calls("search", "search", `book|{"id":7}`, "confirm"),
			map[string]float64{ModeExact: 0, ModeInOrder: 1, ModeAnyOrder: 1, ModeSubset: 0}},
	}
	for _, tt := range tests {
		for mode, wantScore := range tt.modes {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				ev, err := New(spec.Evaluator{Name: TrajectoryMatch, Mode: mode}, nil)
				if err != nil {
					t.Fatal(err)
				}
				rec := record("r", "q", map[string]any{"trajectory": want})
				scores, err := ev.Evaluate(context.Background(), Trial{Record: rec, Events: tt.events})
				if err != nil {
					t.Fatal(err)
				}
				if scores[0].Name != "trajectory-match" || scores[0].Value != wantScore {
					t.Errorf("trajectory-match = %v, want %v (details %s)", scores[0].Value, wantScore, scores[0].Details)
				}
			})
		}
	}
}

func TestTrajectoryMatchSources(t *testing.T) {
	ev, _ := New(spec.Evaluator{Name: TrajectoryMatch}, nil) // default mode in-order
	events := calls("a", "x", "b")
	for name, rec := range map[string]spec.Record{
		"metadata trajectory":      withMeta(record("r", "q", nil), "expected_trajectory", []any{"a", "b"}),
		"falls back to tool calls": withMeta(record("r", "q", nil), "expected_tool_calls", []any{"a", "b"}),
		"expected tool calls":      record("r", "q", map[string]any{"tool_calls": []any{"a", "b"}}),
	} {
		scores, err := ev.Evaluate(context.Background(), Trial{Record: rec, Events: events})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if scores[0].Value != 1 || !strings.Contains(string(scores[0].Details), `"mode":"in-order"`) {
			t.Errorf("%s: %+v %s", name, scores[0], scores[0].Details)
		}
	}
	_, err := ev.Evaluate(context.Background(), Trial{Record: record("rec-5", "q", "text answer"), Events: events})
	if err == nil || !strings.Contains(err.Error(), `record "rec-5" has no expected trajectory, which trajectory-match compares with`) {
		t.Errorf("error = %v", err)
	}
}

func TestLoops(t *testing.T) {
	tests := []struct {
		name       string
		maxRepeats int
		events     []trajectory.Event
		loops      float64
	}{
		{"no repeats", 0, calls(`read_file|{"path":"a"}`, `read_file|{"path":"b"}`), 0},
		{"two allowed by default", 0, calls(`read_file|{"path":"a"}`, `read_file|{"path":"a"}`), 0},
		{"third is a loop", 0, calls(`read_file|{"path":"a"}`, "bash", `read_file|{"path":"a"}`, `read_file|{"path":"a"}`), 1},
		{"arguments compare as JSON", 0, calls(`f|{"a":1,"b":2}`, `f|{"b":2, "a":1}`, `f|{ "a": 1, "b": 2 }`, `f|{"a":1,"b":2}`), 2},
		{"new result is progress", 0, calls(`bash|{"c":"pytest"}|2 failed`, `bash|{"c":"pytest"}|1 failed`, `bash|{"c":"pytest"}|passed`), 0},
		{"same result is a loop", 0, calls(`bash|{"c":"pytest"}|2 failed`, `bash|{"c":"pytest"}|2 failed`, `bash|{"c":"pytest"}|2 failed`, `bash|{"c":"pytest"}|2 failed`), 2},
		{"max_repeats 1", 1, calls("a", "a", "b", "b", "b"), 3},
		{"max_repeats 5", 5, calls("a", "a", "a", "a", "a"), 0},
		{"no calls", 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := New(spec.Evaluator{Name: Loops, MaxRepeats: tt.maxRepeats}, nil)
			if err != nil {
				t.Fatal(err)
			}
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "q", nil), Events: tt.events, Agent: true})
			if err != nil {
				t.Fatal(err)
			}
			got := scoreMap(scores)
			if got["loops"] != tt.loops || got["loop-detected"] != b2f(tt.loops > 0) {
				t.Errorf("scores = %v, want loops %v (details %s)", got, tt.loops, scores[0].Details)
			}
		})
	}
	ev, _ := New(spec.Evaluator{Name: Loops}, nil)
	scores, _ := ev.Evaluate(context.Background(), Trial{Events: calls("x", "x", "x")})
	if d := string(scores[0].Details); !strings.Contains(d, `"repeated":[{"name":"x","arguments":"null","count":3}]`) {
		t.Errorf("details = %s", d)
	}
}

func TestJSONSubset(t *testing.T) {
	tests := []struct {
		want, got string
		ok        bool
	}{
		{`{}`, `{"a":1}`, true},
		{`{"a":1}`, `{"a":1.0,"b":2}`, true},
		{`{"a":{"b":[1,{"c":true}]}}`, `{"a":{"b":[1,{"c":true,"d":0}],"e":1}}`, true},
		{`{"a":[1]}`, `{"a":[1,2]}`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
		{`{"a":null}`, `{}`, false},
		{`{"a":null}`, `{"a":null}`, true},
		{`[1,2]`, `[2,1]`, false},
		{`"x"`, `"x"`, true},
	}
	for _, tt := range tests {
		var w, g any
		if err := json.Unmarshal([]byte(tt.want), &w); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tt.got), &g); err != nil {
			t.Fatal(err)
		}
		if jsonSubset(w, g) != tt.ok {
			t.Errorf("jsonSubset(%s, %s) = %v, want %v", tt.want, tt.got, !tt.ok, tt.ok)
		}
	}
}

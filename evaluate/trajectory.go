package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// This file holds the trajectory evaluators of the agent pack:
// tool-call-accuracy, trajectory-match and loops.
//
// Where a record states what it expects:
//
//	metadata: {expected_tool_calls: [...]}   or   expected: {tool_calls: [...]}
//	metadata: {expected_trajectory: [...]}   or   expected: {trajectory: [...]}
//
// The metadata key wins when both are present. Each item is a tool name
// ("read_file") or {name, arguments}; arguments, when given, must be a JSON
// subset of the actual call's arguments (objects: every given key present
// with a matching value; arrays: same length, element by element; scalars:
// equal), so an expectation can pin only the arguments that matter.
// trajectory-match falls back to the expected tool calls when the record
// has no expected trajectory.

// expectedCall is one expected tool call.
type expectedCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// UnmarshalJSON accepts a bare tool name or {name, arguments}.
func (c *expectedCall) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*c = expectedCall{Name: name}
	} else {
		type plain expectedCall
		var p plain
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("an expected call is a tool name or {name, arguments}: %w", err)
		}
		*c = expectedCall(p)
	}
	if c.Name == "" {
		return fmt.Errorf("an expected call has no tool name")
	}
	return nil
}

// expectedCalls reads the record's expected calls from metadata[metaKey] or
// expected[expKey]. ok is false when the record states neither.
func expectedCalls(r spec.Record, metaKey, expKey string) (calls []expectedCall, where string, ok bool, err error) {
	if v, found := r.Metadata[metaKey]; found && !v.IsZero() {
		where = "metadata." + metaKey
		if err := json.Unmarshal(v, &calls); err != nil {
			return nil, where, true, fmt.Errorf("record %q: %s: %w", r.ID, where, err)
		}
		return calls, where, true, nil
	}
	var obj map[string]json.RawMessage
	if !r.Expected.IsZero() && json.Unmarshal(r.Expected, &obj) == nil {
		if v, found := obj[expKey]; found {
			where = "expected." + expKey
			if err := json.Unmarshal(v, &calls); err != nil {
				return nil, where, true, fmt.Errorf("record %q: %s: %w", r.ID, where, err)
			}
			return calls, where, true, nil
		}
	}
	return nil, "", false, nil
}

// actualCalls returns the tool calls the agent made: the trajectory's
// tool_call events, or, for a harness that records only messages, the tool
// calls of its assistant messages.
func actualCalls(events []trajectory.Event) []trajectory.ToolCall {
	var out []trajectory.ToolCall
	for _, e := range events {
		if e.Kind == trajectory.KindToolCall && e.ToolCall != nil {
			out = append(out, *e.ToolCall)
		}
	}
	if out != nil {
		return out
	}
	for _, e := range events {
		if e.Kind == trajectory.KindMessage && e.Message != nil && e.Message.Role == trajectory.RoleAssistant {
			out = append(out, e.Message.ToolCalls...)
		}
	}
	return out
}

// callMatches reports whether actual satisfies the expectation.
func callMatches(want expectedCall, got trajectory.ToolCall) bool {
	if want.Name != got.Name {
		return false
	}
	if len(bytes.TrimSpace(want.Arguments)) == 0 || bytes.Equal(bytes.TrimSpace(want.Arguments), []byte("null")) {
		return true
	}
	var w, g any
	if json.Unmarshal(want.Arguments, &w) != nil {
		return false
	}
	w = unwrapJSONString(w)
	if json.Unmarshal(got.Arguments, &g) != nil {
		return false
	}
	return jsonSubset(w, unwrapJSONString(g))
}

// unwrapJSONString decodes a string that itself holds a JSON object or
// array: some providers send tool arguments as a JSON-encoded string.
func unwrapJSONString(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") {
		return v
	}
	var inner any
	if json.Unmarshal([]byte(t), &inner) != nil {
		return v
	}
	return inner
}

// jsonSubset reports whether want is a subset of got (see the file comment).
func jsonSubset(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !jsonSubset(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !jsonSubset(w[i], g[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(want, got)
	}
}

// matchCalls pairs expected and actual calls one to one, as many as
// possible (maximum bipartite matching, so an expectation that pins fewer
// arguments never takes the only call a stricter one could match). It
// returns, per expected call, the index of its actual call or -1.
func matchCalls(want []expectedCall, got []trajectory.ToolCall) []int {
	ok := make([][]bool, len(want))
	for i := range want {
		ok[i] = make([]bool, len(got))
		for j := range got {
			ok[i][j] = callMatches(want[i], got[j])
		}
	}
	ownerOf := make([]int, len(got)) // actual j → expected i, or -1
	for j := range ownerOf {
		ownerOf[j] = -1
	}
	var augment func(i int, seen []bool) bool
	augment = func(i int, seen []bool) bool {
		for j := range got {
			if !ok[i][j] || seen[j] {
				continue
			}
			seen[j] = true
			if ownerOf[j] < 0 || augment(ownerOf[j], seen) {
				ownerOf[j] = i
				return true
			}
		}
		return false
	}
	for i := range want {
		augment(i, make([]bool, len(got)))
	}
	match := make([]int, len(want))
	for i := range match {
		match[i] = -1
	}
	for j, i := range ownerOf {
		if i >= 0 {
			match[i] = j
		}
	}
	return match
}

func names(calls []trajectory.ToolCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.Name
	}
	return out
}

type toolCallAccuracy struct{}

func newToolCallAccuracy(spec.Evaluator, model.Connector) (Evaluator, error) {
	return toolCallAccuracy{}, nil
}

func (toolCallAccuracy) Name() string { return ToolCallAccuracy }

// Evaluate compares the expected calls with those made, as multisets.
// precision = matched/made, recall = matched/expected, F1 their harmonic
// mean. With nothing made, precision is 1 when nothing was expected, else 0;
// with nothing expected, recall is 1.
func (toolCallAccuracy) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	want, where, ok, err := expectedCalls(t.Record, "expected_tool_calls", "tool_calls")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("record %q has no expected tool calls, which tool-call-accuracy compares with: add metadata.expected_tool_calls or expected.tool_calls (a list of tool names or {name, arguments})", t.Record.ID)
	}
	got := actualCalls(t.Events)
	match := matchCalls(want, got)
	matched := 0
	var missing []string
	used := make([]bool, len(got))
	for i, j := range match {
		if j >= 0 {
			matched++
			used[j] = true
		} else {
			missing = append(missing, want[i].Name)
		}
	}
	var extra []string
	for j, u := range used {
		if !u {
			extra = append(extra, got[j].Name)
		}
	}
	precision, recall := 1.0, 1.0
	if len(got) > 0 {
		precision = float64(matched) / float64(len(got))
	} else if len(want) > 0 {
		precision = 0
	}
	if len(want) > 0 {
		recall = float64(matched) / float64(len(want))
	}
	f1 := 0.0
	if precision+recall > 0 {
		f1 = 2 * precision * recall / (precision + recall)
	}
	d := details(map[string]any{"from": where, "expected": len(want), "made": len(got), "matched": matched, "missing": missing, "unexpected": extra})
	return []Score{
		{Name: "tool-call-precision", Value: precision, Details: d},
		{Name: "tool-call-recall", Value: recall},
		{Name: "tool-call-f1", Value: f1},
	}, nil
}

// Trajectory match modes.
const (
	ModeExact    = "exact"     // the same calls in the same order, nothing else
	ModeInOrder  = "in-order"  // the expected calls in order; other calls may come between
	ModeAnyOrder = "any-order" // the expected calls in any order; other calls allowed
	ModeSubset   = "subset"    // every call made is among the expected ones; not all need be made
)

type trajectoryMatch struct{ mode string }

func newTrajectoryMatch(cfg spec.Evaluator, _ model.Connector) (Evaluator, error) {
	switch cfg.Mode {
	case "":
		return trajectoryMatch{mode: ModeInOrder}, nil
	case ModeExact, ModeInOrder, ModeAnyOrder, ModeSubset:
		return trajectoryMatch{mode: cfg.Mode}, nil
	}
	return nil, fmt.Errorf("mode %q: use exact, in-order (the default), any-order or subset", cfg.Mode)
}

func (trajectoryMatch) Name() string { return TrajectoryMatch }

func (e trajectoryMatch) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	want, where, ok, err := expectedCalls(t.Record, "expected_trajectory", "trajectory")
	if err == nil && !ok {
		want, where, ok, err = expectedCalls(t.Record, "expected_tool_calls", "tool_calls")
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("record %q has no expected trajectory, which trajectory-match compares with: add metadata.expected_trajectory or expected.trajectory (a list of tool names or {name, arguments})", t.Record.ID)
	}
	got := actualCalls(t.Events)
	var pass bool
	switch e.mode {
	case ModeExact:
		pass = len(want) == len(got)
		for i := 0; pass && i < len(want); i++ {
			pass = callMatches(want[i], got[i])
		}
	case ModeInOrder:
		// Greedy earliest matching decides whether want is a subsequence.
		i := 0
		for j := 0; i < len(want) && j < len(got); j++ {
			if callMatches(want[i], got[j]) {
				i++
			}
		}
		pass = i == len(want)
	case ModeAnyOrder, ModeSubset:
		matched := 0
		for _, j := range matchCalls(want, got) {
			if j >= 0 {
				matched++
			}
		}
		if e.mode == ModeAnyOrder {
			pass = matched == len(want)
		} else {
			pass = matched == len(got)
		}
	}
	wantNames := make([]string, len(want))
	for i, w := range want {
		wantNames[i] = w.Name
	}
	return []Score{{Name: "trajectory-match", Value: b2f(pass), Details: details(map[string]any{
		"mode": e.mode, "from": where, "expected": wantNames, "made": names(got),
	})}}, nil
}

// DefaultMaxRepeats is how often the loops evaluator lets an identical call
// occur before it counts the rest as looping.
const DefaultMaxRepeats = 2

type loops struct{ maxRepeats int }

func newLoops(cfg spec.Evaluator, _ model.Connector) (Evaluator, error) {
	switch {
	case cfg.MaxRepeats < 0:
		return nil, fmt.Errorf("max_repeats %d must not be negative (0 takes the default %d)", cfg.MaxRepeats, DefaultMaxRepeats)
	case cfg.MaxRepeats == 0:
		return loops{maxRepeats: DefaultMaxRepeats}, nil
	}
	return loops{maxRepeats: cfg.MaxRepeats}, nil
}

func (loops) Name() string { return Loops }

// repeat is a call that occurred more often than allowed.
type repeat struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Count     int    `json:"count"`
}

// Evaluate counts repeated identical calls, anywhere in the trajectory.
// Calls are identical when the tool, the arguments (compared as JSON) and
// the result are the same: the same call getting the same answer again
// means the agent learned nothing, whereas re-running the tests after each
// edit (same call, new result) is progress. A call whose result is not in
// the trajectory is compared by tool and arguments. An identical call may
// occur max_repeats times (default 2); loops counts every occurrence beyond
// that, and loop-detected is 1 when loops > 0.
func (e loops) Evaluate(_ context.Context, t Trial) ([]Score, error) {
	results := map[string]string{}
	for _, ev := range t.Events {
		if ev.Kind == trajectory.KindToolResult && ev.ToolResult != nil && ev.ToolResult.CallID != "" {
			r := ev.ToolResult
			results[r.CallID] = fmt.Sprintf("%t\x00%s", r.IsError, r.Output)
		}
	}
	counts := map[string]int{}
	var order []string
	first := map[string]trajectory.ToolCall{}
	for _, c := range actualCalls(t.Events) {
		key := c.Name + "\x00" + canonical(c.Arguments)
		if res, ok := results[c.ID]; ok && c.ID != "" {
			key += "\x00" + res
		}
		if counts[key] == 0 {
			order = append(order, key)
			first[key] = c
		}
		counts[key]++
	}
	total := 0
	var reps []repeat
	for _, k := range order {
		if n := counts[k]; n > e.maxRepeats {
			total += n - e.maxRepeats
			c := first[k]
			reps = append(reps, repeat{Name: c.Name, Arguments: clip(canonical(c.Arguments), 200), Count: n})
		}
	}
	d := details(map[string]any{"max_repeats": e.maxRepeats, "repeated": reps})
	return []Score{
		{Name: "loops", Value: float64(total), Details: d},
		{Name: "loop-detected", Value: b2f(total > 0)},
	}, nil
}

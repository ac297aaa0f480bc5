package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"evals.si/agent/tools"
	"evals.si/spec"
	"evals.si/trajectory"
)

func js(s string) spec.JSON { return spec.JSON(s) }

func TestMockMatching(t *testing.T) {
	weather := spec.MockTool{Name: "weather", Responses: []spec.MockResponse{
		{Arguments: js(`{"city":"Paris","units":{"temp":"C","wind":"kmh"}}`), Response: js(`"18C, light rain"`)},
		{Arguments: js(`{"city":"Oslo"}`), Response: js(`{"temp": 4, "sky": ["snow"]}`)},
		{Arguments: js(`{"city":"Oslo"}`), Response: js(`"second Oslo entry, never used"`)},
		{Arguments: js(`{"n":1}`), Response: js(`"one"`)},
	}}
	withDefault := spec.MockTool{Name: "lookup", Responses: []spec.MockResponse{
		{Arguments: js(`{"id":7}`), Response: js(`"seven"`)},
		{Response: js(`"default answer"`)},
		{Response: js(`"second default, never used"`)},
	}}
	single := spec.MockTool{Name: "now", Response: js(`"2026-01-01T00:00:00Z"`)}
	number := spec.MockTool{Name: "count", Response: js(`42`)}

	for _, tc := range []struct {
		name    string
		mock    spec.MockTool
		args    string
		want    string
		isError bool
	}{
		{"exact", weather, `{"city":"Paris","units":{"temp":"C","wind":"kmh"}}`, "18C, light rain", false},
		{"keys in another order, nested too", weather, `{"units":{"wind":"kmh","temp":"C"},"city":"Paris"}`, "18C, light rain", false},
		{"insignificant whitespace", weather, "{ \"city\" :\n \"Oslo\" }", `{"temp":4,"sky":["snow"]}`, false},
		{"first match wins, object response is compact JSON", weather, `{"city":"Oslo"}`, `{"temp":4,"sky":["snow"]}`, false},
		{"numbers by value", weather, `{"n":1.0}`, "one", false},
		{"extra argument does not match", weather, `{"city":"Oslo","x":1}`, "", true},
		{"different value", weather, `{"city":"paris"}`, "", true},
		{"invalid JSON arguments", weather, `{"city":`, "", true},
		{"default entry", withDefault, `{"id":8}`, "default answer", false},
		{"keyed entry before default", withDefault, `{"id":7}`, "seven", false},
		{"empty arguments are {}", withDefault, ``, "default answer", false},
		{"single response", single, `{"anything":true}`, "2026-01-01T00:00:00Z", false},
		{"non-string response", number, `{}`, "42", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tools.NewMock("harness.builtin.tools.mocks[0]", tc.mock)
			if err != nil {
				t.Fatal(err)
			}
			res, err := m.Call(context.Background(), trajectory.ToolCall{ID: "c", Name: tc.mock.Name, Arguments: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError != tc.isError {
				t.Fatalf("IsError = %v, want %v (output %q)", res.IsError, tc.isError, res.Output)
			}
			if !tc.isError && res.Output != tc.want {
				t.Errorf("output %q, want %q", res.Output, tc.want)
			}
			if res.CallID != "c" || res.Name != tc.mock.Name {
				t.Errorf("result names call %q tool %q", res.CallID, res.Name)
			}
		})
	}

	// With no match and no default, the model is told the known sets.
	m, err := tools.NewMock("harness.builtin.tools.mocks[0]", weather)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := m.Call(context.Background(), trajectory.ToolCall{Name: "weather", Arguments: json.RawMessage(`{"city":"Rome"}`)})
	for _, w := range []string{`{"city":"Rome"}`, `{"city":"Paris","units":{"temp":"C","wind":"kmh"}}`, `{"city":"Oslo"}`} {
		if !strings.Contains(res.Output, w) {
			t.Errorf("no-match message %q lacks %s", res.Output, w)
		}
	}
}

func TestMockSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mock spec.MockTool
		want string
	}{
		{"no name", spec.MockTool{Response: js(`"x"`)}, "needs a name"},
		{"no response", spec.MockTool{Name: "m"}, "needs response or responses"},
		{"parameters not an object", spec.MockTool{Name: "m", Response: js(`"x"`), Parameters: js(`[1]`)}, "parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tools.NewMock("harness.builtin.tools.mocks[3]", tc.mock)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "mocks[3]") {
				t.Errorf("error %v, want one naming mocks[3] and %q", err, tc.want)
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		`{"b":1,"a":{"d":[{"z":1,"y":2}],"c":"<&>"}}`: `{"a":{"c":"<&>","d":[{"y":2,"z":1}]},"b":1}`,
		" [ 1 , 2.50 ] ": `[1,2.5]`,
		`"s"`:            `"s"`,
	} {
		got, err := tools.Canonical([]byte(in))
		if err != nil || got != want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// decisions draws faults for a grid of calls.
func decisions(f *tools.Faults, record string) []string {
	var out []string
	for trial := 1; trial <= 3; trial++ {
		for step := 1; step <= 10; step++ {
			for i := 0; i < 3; i++ {
				out = append(out, f.Decide(record, trial, step, i, "bash"))
			}
		}
	}
	return out
}

func TestFaultsDeterministic(t *testing.T) {
	rules := []spec.Fault{{Tool: "bash", Kind: "error", Rate: 0.3}, {Tool: "*", Kind: "malformed", Rate: 0.3}}
	a, err := tools.NewFaults("my-run", rules)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tools.NewFaults("my-run", rules)
	da, db := decisions(a, "r1"), decisions(b, "r1")
	if strings.Join(da, ",") != strings.Join(db, ",") {
		t.Fatal("the same run, record and calls got different faults")
	}
	counts := map[string]int{}
	for _, k := range da {
		counts[k]++
	}
	// 90 draws at 0.3/0.3/0.4: each kind shows up.
	if counts["error"] == 0 || counts["malformed"] == 0 || counts[""] == 0 {
		t.Errorf("kinds drawn %v: want some of each", counts)
	}
	if strings.Join(da, ",") == strings.Join(decisions(a, "r2"), ",") {
		t.Error("another record got the very same faults")
	}
	other, _ := tools.NewFaults("other-run", rules)
	if strings.Join(da, ",") == strings.Join(decisions(other, "r1"), ",") {
		t.Error("another run name got the very same faults")
	}
	// The tool name is part of the draw, and rules apply only to their tool.
	if k := a.Decide("r1", 1, 1, 0, "read_file"); k == "error" {
		t.Error("a bash-only rule fired for read_file")
	}
}

func TestFaultRates(t *testing.T) {
	never, _ := tools.NewFaults("r", []spec.Fault{{Tool: "*", Kind: "timeout", Rate: 0}})
	always, _ := tools.NewFaults("r", []spec.Fault{{Tool: "*", Kind: "timeout", Rate: 1}})
	for _, k := range decisions(never, "x") {
		if k != "" {
			t.Fatalf("rate 0 injected %q", k)
		}
	}
	for _, k := range decisions(always, "x") {
		if k != "timeout" {
			t.Fatalf("rate 1 injected %q", k)
		}
	}
	var none *tools.Faults
	if k := none.Decide("x", 1, 1, 0, "bash"); k != "" {
		t.Errorf("nil faults injected %q", k)
	}
}

func TestFaultErrors(t *testing.T) {
	if _, err := tools.NewFaults("r", []spec.Fault{{Tool: "bash", Kind: "crash", Rate: 0.5}}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := tools.NewFaults("r", []spec.Fault{{Tool: "bash", Kind: "error", Rate: 1.5}}); err == nil {
		t.Error("rate above 1 accepted")
	}
	f, _ := tools.NewFaults("r", []spec.Fault{{Tool: "*", Kind: "error", Rate: 1}, {Tool: "wether", Kind: "error", Rate: 1}})
	err := f.Check([]string{"bash", "weather"})
	if err == nil || !strings.Contains(err.Error(), "faults[1].tool") || !strings.Contains(err.Error(), "wether") {
		t.Errorf("Check: %v, want an error naming faults[1].tool", err)
	}
}

func TestInjectedAndMalformed(t *testing.T) {
	call := trajectory.ToolCall{ID: "c", Name: "bash"}
	for _, kind := range []string{tools.FaultError, tools.FaultTimeout} {
		r := tools.Injected(kind, call)
		if !r.IsError || r.Fault != kind || r.CallID != "c" || r.Output == "" {
			t.Errorf("Injected(%s) = %+v", kind, r)
		}
	}
	if r := tools.Injected(tools.FaultTimeout, call); !strings.Contains(r.Output, "timed out") {
		t.Errorf("timeout says %q", r.Output)
	}
	code := 0
	r := tools.Malform(trajectory.ToolResult{CallID: "c", Name: "bash", Output: "a\"\ncde", ExitCode: &code})
	if r.Output != `{"output":"a\"\n` || r.Fault != "malformed" || r.ExitCode == nil {
		t.Errorf("Malform = %+v", r)
	}
	if json.Valid([]byte(r.Output)) {
		t.Error("a malformed result parses as JSON")
	}
}

func TestSetClashes(t *testing.T) {
	m1, _ := tools.NewMock("harness.builtin.tools.mocks[0]", spec.MockTool{Name: "weather", Response: js(`"x"`)})
	m2, _ := tools.NewMock("harness.builtin.tools.mocks[1]", spec.MockTool{Name: "weather", Response: js(`"y"`)})
	bash, _ := tools.NewMock("harness.builtin.tools.mocks[2]", spec.MockTool{Name: "bash", Response: js(`"y"`)})
	if _, err := tools.NewSet([]string{"bash"}, "agent's own", m1, m2); err == nil || !strings.Contains(err.Error(), "mocks[0]") || !strings.Contains(err.Error(), "mocks[1]") {
		t.Errorf("clash between mocks: %v", err)
	}
	if _, err := tools.NewSet([]string{"bash"}, "agent's own", bash); err == nil || !strings.Contains(err.Error(), "agent's own") {
		t.Errorf("clash with an own tool: %v", err)
	}
	set, err := tools.NewSet([]string{"bash"}, "agent's own", m1)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := set.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	res, ok, err := ss.Call(context.Background(), trajectory.ToolCall{ID: "c", Name: "weather"})
	if !ok || err != nil || res.Output != "x" {
		t.Errorf("routing: %+v %v %v", res, ok, err)
	}
	if _, ok, _ := ss.Call(context.Background(), trajectory.ToolCall{Name: "nope"}); ok {
		t.Error("an unknown tool was routed")
	}
}

package cli

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/agent"
	"evals.si/spec"
	"evals.si/trajectory"
)

// brief renders an event as one comparable line.
func brief(e trajectory.Event) string {
	switch e.Kind {
	case trajectory.KindModelCall:
		m := e.ModelCall
		return fmt.Sprintf("%d model_call %s in=%d out=%d cost=%.4f", e.Step, m.Model, m.Usage.InputTokens, m.Usage.OutputTokens, m.CostUSD)
	case trajectory.KindMessage:
		var names []string
		for _, c := range e.Message.ToolCalls {
			names = append(names, c.Name)
		}
		return fmt.Sprintf("%d message %s %q %v", e.Step, e.Message.Role, e.Message.Content, names)
	case trajectory.KindToolCall:
		return fmt.Sprintf("%d tool_call %s %s %s", e.Step, e.ToolCall.ID, e.ToolCall.Name, e.ToolCall.Arguments)
	case trajectory.KindToolResult:
		r := e.ToolResult
		code := "-"
		if r.ExitCode != nil {
			code = fmt.Sprint(*r.ExitCode)
		}
		return fmt.Sprintf("%d tool_result %s %s %q err=%v exit=%s", e.Step, r.CallID, r.Name, r.Output, r.IsError, code)
	case trajectory.KindLog:
		return fmt.Sprintf("%d log %s", e.Step, e.Log.Text)
	}
	return fmt.Sprintf("%d %s", e.Step, e.Kind)
}

func parseFixture(t *testing.T, format, file string, base int) (summary, []trajectory.Event) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var events []trajectory.Event
	p := &parser{base: base, emit: func(e trajectory.Event) error { events = append(events, e); return nil }}
	sum, err := parseFormat(format, b, p)
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	return sum, events
}

func checkEvents(t *testing.T, events []trajectory.Event, want []string) {
	t.Helper()
	var got []string
	for _, e := range events {
		got = append(got, brief(e))
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestParseClaudeStreamJSON(t *testing.T) {
	sum, events := parseFixture(t, FormatClaude, "claude-stream.jsonl", 0)
	checkEvents(t, events, []string{
		"0 log claude code session 5f0c2b1e-8d0a-4c4e-9a51-0d6f2f3c9b11: model claude-sonnet-4-5-20250929, cwd /workspace, 8 tools",
		// One model call per message id, though the message spans three
		// lines, and one assistant message with its text and tool call.
		// The result's cost is split over the calls.
		"1 model_call claude-sonnet-4-5-20250929 in=12204 out=9 cost=0.0137",
		`1 message assistant "Let me look at the code." [Bash]`,
		`1 tool_call toolu_01 Bash {"command":"cat calc.py","description":"Show calc.py"}`,
		`1 tool_result toolu_01 Bash "def add(a, b):\n    return a - b\n" err=false exit=-`,
		"2 model_call claude-sonnet-4-5-20250929 in=12356 out=120 cost=0.0145",
		`2 message assistant "" [Edit]`,
		`2 tool_call toolu_02 Edit {"file_path":"/workspace/calc.py","old_string":"return a - b","new_string":"return a + b"}`,
		`2 tool_result toolu_02 Edit "<tool_use_error>File has not been read yet.</tool_use_error>" err=true exit=-`,
		"3 model_call claude-sonnet-4-5-20250929 in=12408 out=15 cost=0.0139",
		`3 message assistant "Fixed add() in calc.py." []`,
	})
	if sum.steps != 3 || sum.output != "Fixed add() in calc.py." || sum.stop != agent.StopAnswered {
		t.Errorf("summary %+v", sum)
	}
	// The result's totals are the trial's, and the calls add up to them.
	if sum.usage != (trajectory.Usage{InputTokens: 18 + 1350 + 35600, OutputTokens: 144}) || math.Abs(sum.costUSD-0.0421) > 1e-12 {
		t.Errorf("usage %+v cost %v", sum.usage, sum.costUSD)
	}
	checkAddsUp(t, events, sum)
	if sum.unreadable != 1 || !strings.Contains(sum.firstUnreadable, "this line is not JSON") {
		t.Errorf("unreadable %d %q", sum.unreadable, sum.firstUnreadable)
	}
}

func TestParseClaudeErrorResults(t *testing.T) {
	for _, c := range []struct{ line, stop string }{
		{`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"session_id":"s","total_cost_usd":0.1,"usage":{"input_tokens":1,"output_tokens":2}}`, agent.StopMaxSteps},
		{`{"type":"result","subtype":"error_max_budget_usd","is_error":true,"session_id":"s","total_cost_usd":1.0}`, agent.StopBudgetUSD},
		{`{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s","cost_usd":0.2,"errors":["API Error: 401"]}`, StopAgentError},
	} {
		p := &parser{emit: func(trajectory.Event) error { return nil }}
		sum, err := parseFormat(FormatClaude, []byte(c.line+"\n"), p)
		if err != nil {
			t.Fatal(err)
		}
		if sum.stop != c.stop || sum.costUSD == 0 {
			t.Errorf("%s: stop %q cost %v, want stop %q", c.line, sum.stop, sum.costUSD, c.stop)
		}
	}
}

func TestParseCodexJSON(t *testing.T) {
	sum, events := parseFixture(t, FormatCodex, "codex.jsonl", 2)
	checkEvents(t, events, []string{
		"2 log codex thread 0199a213-81c0-7800-8aa1-bbab2a035a53",
		// The turn's events carry the turn's step; its usage comes at the end.
		`3 tool_call item_1 command_execution {"command":"bash -lc 'cat calc.py'"}`,
		`3 tool_result item_1 command_execution "def add(a, b):\n    return a - b\n" err=false exit=0`,
		`3 tool_call item_2 file_change {"changes":[{"path":"/workspace/calc.py","kind":"update"}]}`,
		`3 tool_result item_2 file_change "update /workspace/calc.py" err=false exit=-`,
		`3 tool_call item_3 command_execution {"command":"bash -lc 'python3 -m pytest -q'"}`,
		`3 tool_result item_3 command_execution "1 failed, 1 passed in 0.02s\n" err=true exit=1`,
		`3 tool_call item_4 docs.search {"q":"mean"}`,
		`3 tool_result item_4 docs.search "statistics.fmean" err=false exit=-`,
		`3 message assistant "Fixed add(); mean() still floors." []`,
		"3 model_call  in=24763 out=122 cost=0.0000",
		`4 message assistant "Both bugs are fixed." []`,
		"4 model_call  in=1000 out=20 cost=0.0000",
	})
	if sum.steps != 2 || sum.output != "Both bugs are fixed." || sum.stop != agent.StopAnswered || sum.usage != (trajectory.Usage{InputTokens: 25763, OutputTokens: 142}) {
		t.Errorf("summary %+v", sum)
	}
}

func TestParseCodexTurnFailed(t *testing.T) {
	in := `{"type":"thread.started","thread_id":"t"}
{"type":"turn.started"}
{"type":"error","message":"stream disconnected, retrying 1/5"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}
`
	var events []trajectory.Event
	p := &parser{emit: func(e trajectory.Event) error { events = append(events, e); return nil }}
	sum, err := parseFormat(FormatCodex, []byte(in), p)
	if err != nil {
		t.Fatal(err)
	}
	if sum.stop != StopAgentError || !strings.Contains(sum.stopDetail, "401") || sum.steps != 1 {
		t.Errorf("summary %+v", sum)
	}
	checkEvents(t, events, []string{"0 log codex thread t", "1 log codex error: stream disconnected, retrying 1/5", "1 model_call  in=0 out=0 cost=0.0000"})
}

func TestParseDSHJSON(t *testing.T) {
	sum, events := parseFixture(t, FormatDSH, "dsh.jsonl", 0)
	checkEvents(t, events, []string{
		`0 message user "Fix calc.py" []`,
		"1 model_call deepseek-chat in=812 out=40 cost=0.0000",
		`1 message assistant "Let me read calc.py." []`,
		`1 tool_call call_1 read_file {"path":"calc.py"}`,
		`1 tool_result call_1 read_file "def add(a, b):\n    return a - b\n" err=false exit=-`,
		"2 model_call  in=900 out=25 cost=0.0000",
		`2 message assistant "Running the tests." []`,
		`2 tool_call call_2 bash {"command":"python3 -m pytest -q"}`,
		`2 tool_result call_2 bash "exit 1" err=true exit=-`,
		"3 model_call  in=1000 out=10 cost=0.0000",
		`3 message assistant "Fixed add()." []`,
	})
	if sum.steps != 3 || sum.output != "Fixed add()." || sum.stop != agent.StopAnswered || sum.usage != (trajectory.Usage{InputTokens: 2712, OutputTokens: 75}) {
		t.Errorf("summary %+v", sum)
	}
	// Event times are the agent's own.
	if want := time.Date(2026, 11, 2, 10, 0, 1, 500e6, time.UTC); !events[1].Time.Equal(want) {
		t.Errorf("model call time %v, want %v", events[1].Time, want)
	}
	// A turn that does not complete is the agent's failure.
	p := &parser{emit: func(trajectory.Event) error { return nil }}
	sum, err := parseFormat(FormatDSH, []byte(`{"type":"turn/end","seq":1,"time":1762077600000,"data":{"turn":1,"reason":{"kind":"max-tokens"}}}`), p)
	if err != nil || sum.stop != StopAgentError || !strings.Contains(sum.stopDetail, "max-tokens") {
		t.Errorf("turn/end max-tokens: %+v %v", sum, err)
	}
}

// TestParsePricing: a format that reports tokens and a model but no cost is
// priced from the pricing table.
func TestParsePricing(t *testing.T) {
	p := &parser{emit: func(trajectory.Event) error { return nil }, pricing: map[string]spec.Price{"deepseek-chat": {Input: 1, Output: 2}}}
	sum, err := parseFormat(FormatDSH, []byte(`{"type":"assistant/message","seq":1,"time":"2026-11-02T10:00:00Z","data":{"model":"deepseek-chat","message":"hi","usage":{"input_tokens":1000000,"output_tokens":500000}}}`), p)
	if err != nil {
		t.Fatal(err)
	}
	if sum.costUSD != 2 {
		t.Errorf("cost %v, want 2 (1M input at $1 + 0.5M output at $2)", sum.costUSD)
	}
}

// TestParseLongLines: a line past the line limit is skipped without being
// held whole, and the lines around it still parse.
func TestParseLongLines(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"first"}}` + "\n")
	b.WriteString(`{"type":"item.completed","item":{"id":"b","type":"agent_message","text":"` + strings.Repeat("x", maxLine+10) + `"}}` + "\n")
	b.WriteString(`{"type":"item.completed","item":{"id":"c","type":"agent_message","text":"` + strings.Repeat("y", 200<<10) + `"}}` + "\n")
	b.WriteString(`{"type":"item.completed","item":{"id":"d","type":"agent_message","text":"last"}}`) // no final newline
	var events []trajectory.Event
	p := &parser{emit: func(e trajectory.Event) error { events = append(events, e); return nil }}
	sum, err := parseFormat(FormatCodex, []byte(b.String()), p)
	if err != nil {
		t.Fatal(err)
	}
	if sum.unreadable != 1 || len(events) != 3 || sum.output != "last" {
		t.Fatalf("unreadable %d, %d events, output %q", sum.unreadable, len(events), sum.output)
	}
	// A long text is cut in the event.
	if m := events[1].Message.Content; len(m) > maxText+100 || !strings.Contains(m, "bytes cut]") {
		t.Errorf("long message kept %d bytes", len(m))
	}
}

func TestParseOutputPublic(t *testing.T) {
	b, err := os.ReadFile("testdata/codex.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	s, err := ParseOutput(FormatCodex, b, func(trajectory.Event) error { n++; return nil })
	if err != nil || s.Steps != 2 || s.Output != "Both bugs are fixed." || s.StopReason != agent.StopAnswered || n != 13 {
		t.Errorf("summary %+v, %d events, err %v", s, n, err)
	}
	if _, err := ParseOutput("yaml", b, func(trajectory.Event) error { return nil }); err == nil {
		t.Error("unknown format: no error")
	}
}

// TestParseProviderFailures: the real CLIs' output when their model
// provider answers 401 or 500 (recorded from Claude Code and Codex against
// a server answering only that status) says the run failed; the agent's
// own stops (turn and budget limits, a DeepSeek Harness turn cut at
// max-tokens) do not.
func TestParseProviderFailures(t *testing.T) {
	for _, c := range []struct {
		format, file, want string
	}{
		{FormatClaude, "claude-provider-401.jsonl", "401"},
		{FormatClaude, "claude-provider-500.jsonl", "500"},
		{FormatCodex, "codex-provider-401.jsonl", "401 Unauthorized"},
		{FormatCodex, "codex-provider-500.jsonl", "high demand"},
	} {
		sum, _ := parseFixture(t, c.format, c.file, 0)
		if !strings.Contains(sum.failure, c.want) {
			t.Errorf("%s: failure %q, want it to name %q", c.file, sum.failure, c.want)
		}
	}
	for _, c := range []struct{ format, line string }{
		{FormatClaude, `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"session_id":"s"}`},
		{FormatClaude, `{"type":"result","subtype":"error_max_budget_usd","is_error":true,"session_id":"s"}`},
		{FormatClaude, `{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s"}`},
		{FormatDSH, `{"type":"turn/end","seq":1,"data":{"turn":1,"reason":{"kind":"max-tokens"}}}`},
		{FormatCodex, `{"type":"error","message":"stream disconnected, retrying 1/5"}` + "\n" + `{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}`},
	} {
		p := &parser{emit: func(trajectory.Event) error { return nil }}
		sum, err := parseFormat(c.format, []byte(c.line+"\n"), p)
		if err != nil || sum.failure != "" {
			t.Errorf("%s: failure %q, err %v; the agent's own stop is no failure", c.line, sum.failure, err)
		}
	}
	p := &parser{emit: func(trajectory.Event) error { return nil }}
	sum, _ := parseFormat(FormatClaude, []byte(`{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s","errors":["boom"]}`+"\n"), p)
	if !strings.Contains(sum.failure, "error_during_execution") {
		t.Errorf("error_during_execution: failure %q", sum.failure)
	}
	p = &parser{emit: func(trajectory.Event) error { return nil }}
	sum, _ = parseFormat(FormatDSH, []byte(`{"type":"turn/end","seq":1,"data":{"turn":1,"reason":{"kind":"error","message":"provider 500"}}}`+"\n"), p)
	if !strings.Contains(sum.failure, "provider 500") {
		t.Errorf("dsh turn ending in error: failure %q", sum.failure)
	}
}

// checkAddsUp fails unless the model calls' usage and cost add up to the
// summary's.
func checkAddsUp(t *testing.T, events []trajectory.Event, sum summary) {
	t.Helper()
	var u trajectory.Usage
	var cost float64
	for _, e := range events {
		if e.Kind == trajectory.KindModelCall {
			u = u.Add(e.ModelCall.Usage)
			cost += e.ModelCall.CostUSD
		}
	}
	if u != sum.usage || math.Abs(cost-sum.costUSD) > 1e-9 {
		t.Errorf("model calls add up to %+v $%v, the summary says %+v $%v", u, cost, sum.usage, sum.costUSD)
	}
}

// Two runs of the real Claude Code (2.1) against the scripted model
// server. Its stream repeats each message's usage as the stream began
// (output_tokens 1) and gives the true output only in its result: the
// parser shares the result's totals over the calls, so the calls add up to
// the trial, and both runs read the same. Each event carries the time its
// line arrived; a model call lasts from the line before it.
func TestParseClaudeCodeRealStreams(t *testing.T) {
	var totals []summary
	for _, file := range []string{"claude-code-2.1-run1.jsonl", "claude-code-2.1-run2.jsonl"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			// Line k arrives at t0 + k×100ms.
			t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			lineAt := func(off int) time.Time {
				return t0.Add(time.Duration(bytes.Count(b[:off], []byte("\n"))) * 100 * time.Millisecond)
			}
			var events []trajectory.Event
			p := &parser{emit: func(e trajectory.Event) error { events = append(events, e); return nil }, now: t0.Add(-time.Second), arrived: lineAt}
			sum, err := parseFormat(FormatClaude, b, p)
			if err != nil {
				t.Fatal(err)
			}
			if sum.usage != (trajectory.Usage{InputTokens: 49902, OutputTokens: 183}) || math.Abs(sum.costUSD-0.203268) > 1e-9 {
				t.Errorf("trial usage %+v cost %v, want the result's 49902+183 tokens and $0.203268", sum.usage, sum.costUSD)
			}
			checkAddsUp(t, events, sum)
			var calls, outputs []string
			last := time.Time{}
			for _, e := range events {
				if e.Time.Before(last) {
					t.Errorf("event %s at %s is before the one before it (%s)", e.Kind, e.Time, last)
				}
				last = e.Time
				switch e.Kind {
				case trajectory.KindModelCall:
					mc := e.ModelCall
					if mc.Usage.OutputTokens <= 1 || mc.CostUSD <= 0 || e.DurationMS != 100 || mc.ResponseID == "" {
						t.Errorf("model call %+v, %d ms: want its share of the output tokens and cost, 100 ms", *mc, e.DurationMS)
					}
					calls = append(calls, fmt.Sprint(mc.Usage.InputTokens))
				case trajectory.KindMessage:
					if m := e.Message; m.Role == trajectory.RoleAssistant {
						if m.Content == "" && len(m.ToolCalls) == 0 {
							t.Errorf("an empty assistant message at step %d", e.Step)
						}
						var names []string
						for _, c := range m.ToolCalls {
							names = append(names, c.Name)
						}
						outputs = append(outputs, fmt.Sprintf("%q%v", m.Content, names))
					}
				case trajectory.KindToolResult:
					if e.DurationMS <= 0 {
						t.Errorf("tool result %s has no duration", e.ToolResult.Name)
					}
				}
			}
			if got := strings.Join(calls, ","); got != "12219,12370,12613,12700" {
				t.Errorf("model calls' input tokens %s", got)
			}
			want := []string{
				`"Let me read calc.py and run the tests."[Read Bash]`,
				`"add() subtracts and mean() floors; fixing both."[Edit Edit]`,
				`""[Bash]`,
				`"Fixed add() (it subtracted) and mean() (floor division; now raises ValueError when empty)."[]`,
			}
			if !slices.Equal(outputs, want) {
				t.Errorf("assistant messages:\n%s\nwant:\n%s", strings.Join(outputs, "\n"), strings.Join(want, "\n"))
			}
			totals = append(totals, sum)
		})
	}
	if len(totals) == 2 && (totals[0].usage != totals[1].usage || totals[0].costUSD != totals[1].costUSD) {
		t.Errorf("two runs differ: %+v $%v and %+v $%v", totals[0].usage, totals[0].costUSD, totals[1].usage, totals[1].costUSD)
	}
}

func TestShareOut(t *testing.T) {
	for _, tc := range []struct {
		n       int
		weights []int
		want    []int
	}{
		{182, []int{10, 10, 0, 20}, []int{46, 45, 0, 91}},
		{3, []int{0, 0, 0}, []int{1, 1, 1}},
		{5, []int{1, 1}, []int{3, 2}},
		{0, []int{4, 2}, []int{0, 0}},
	} {
		got := shareOut(tc.n, slices.Clone(tc.weights))
		if !slices.Equal(got, tc.want) {
			t.Errorf("shareOut(%d, %v) = %v, want %v", tc.n, tc.weights, got, tc.want)
		}
	}
}

// A hostile agent writing its output a byte at a time cannot grow the
// arrival record past its bound; offsets still map to a time.
func TestArrivalsBounded(t *testing.T) {
	a := &arrivals{}
	t0 := time.Now()
	for i := range 3 * maxArrivals {
		a.add(1, t0.Add(time.Duration(i)*2*time.Millisecond))
	}
	if len(a.ends) > maxArrivals || a.bytes() != 3*maxArrivals {
		t.Fatalf("%d pieces kept for %d bytes, want at most %d pieces and every byte counted", len(a.ends), a.bytes(), maxArrivals)
	}
	if got := a.at(0, time.Time{}); !got.Equal(t0) {
		t.Errorf("first byte at %v, want %v", got, t0)
	}
}

// Claude Code can run a tool, and write its result, while the message that
// asked for it still streams its next tool_use block (the order depends on
// timing). The blocks after the result are the same model call: one call,
// its usage counted once, and both tool calls in order.
func TestParseClaudeMessageAcrossToolResult(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"system","subtype":"init","session_id":"s1","model":"claude-x","cwd":"/workspace","tools":["Read","Bash"]}`,
		`{"type":"assistant","message":{"id":"msg_A","model":"claude-x","content":[{"type":"text","text":"Reading, then testing."}],"usage":{"input_tokens":1000,"output_tokens":1}}}`,
		`{"type":"assistant","message":{"id":"msg_A","model":"claude-x","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"calc.py"}}],"usage":{"input_tokens":1000,"output_tokens":1}}}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"def add(a, b): ..."}]}}`,
		`{"type":"assistant","message":{"id":"msg_A","model":"claude-x","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"pytest -q"}}],"usage":{"input_tokens":1000,"output_tokens":1}}}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"1 failed"}]}}`,
		`{"type":"assistant","message":{"id":"msg_B","model":"claude-x","content":[{"type":"text","text":"Done."}],"usage":{"input_tokens":1100,"output_tokens":1}}}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"Done.","num_turns":2,"total_cost_usd":0.01,"usage":{"input_tokens":2100,"output_tokens":40}}`,
	}, "\n") + "\n"
	var events []trajectory.Event
	p := &parser{emit: func(e trajectory.Event) error { events = append(events, e); return nil }}
	sum, err := parseFormat(FormatClaude, []byte(stream), p)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	for _, e := range events {
		if e.Kind == trajectory.KindModelCall {
			calls++
		}
	}
	if calls != 2 || sum.steps != 2 {
		t.Errorf("%d model calls, %d steps; want 2 and 2: one per message id", calls, sum.steps)
	}
	if sum.usage.InputTokens != 2100 {
		t.Errorf("input tokens %d, want the session's 2100: msg_A counted once", sum.usage.InputTokens)
	}
	var order []string
	for _, e := range events {
		switch e.Kind {
		case trajectory.KindToolCall:
			order = append(order, fmt.Sprintf("%d call %s", e.Step, e.ToolCall.Name))
		case trajectory.KindToolResult:
			order = append(order, fmt.Sprintf("%d result %s", e.Step, e.ToolResult.Name))
		}
	}
	if want := []string{"1 call Read", "1 result Read", "1 call Bash", "1 result Bash"}; !slices.Equal(order, want) {
		t.Errorf("tool events %v, want %v", order, want)
	}
}

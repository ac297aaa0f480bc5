package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"evals.si/model"
	"evals.si/trajectory"
)

// maxLine bounds one line of a format's output; a longer line is skipped
// (counted as unreadable) without being held whole in memory.
const maxLine = 4 << 20

// maxText bounds one text field copied into an event (a tool's output, a
// message); the rest is cut with a note, so the store holds a trajectory,
// not a transcript of every byte the agent read.
const maxText = 64 << 10

// summary is what a format's output adds up to.
type summary struct {
	// output is the agent's final answer.
	output string
	// steps counts the model calls seen.
	steps   int
	usage   trajectory.Usage
	costUSD float64
	// stop is the reason the format reports ("" when it reports none).
	stop, stopDetail string
	// unreadable counts lines that were not events of the format.
	unreadable      int
	firstUnreadable string
	// failure is set when the format says the agent's run itself failed,
	// not the task: its model provider answered with an error, or the
	// agent program crashed (Claude Code's API errors and
	// error_during_execution, Codex's turn.failed, a DeepSeek Harness turn
	// ending in error). An infrastructure error of the agent's, never a
	// score.
	failure string
	// lastError is the last provider error the output reported on the way
	// (Codex's error events, Claude Code's API error messages), which a
	// later success may make moot: it counts only when the command then
	// exits non-zero.
	lastError string
}

// parser holds what the format parsers share: the event sink, the step
// numbering (continued across turns) and the tool calls seen so far, whose
// names label their results.
type parser struct {
	emit func(trajectory.Event) error
	// base is the number of steps recorded before this output.
	base    int
	pricing model.Pricing

	sum   summary
	calls map[string]string
	// open is set while a step whose model call is reported at its end
	// (a Codex turn) is under way: its events carry the step's number.
	open bool
}

// parseFormat reads out, in the named format, into events.
func parseFormat(format string, out []byte, p *parser) (summary, error) {
	var parse func(io.Reader) error
	switch format {
	case FormatDSH:
		parse = p.dsh
	case FormatClaude:
		parse = p.claude
	case FormatCodex:
		parse = p.codex
	default:
		return summary{}, fmt.Errorf("unknown output format %q", format)
	}
	if err := parse(bytes.NewReader(out)); err != nil {
		return p.sum, err
	}
	return p.sum, nil
}

// beginStep opens a step whose model call is recorded when it ends.
func (p *parser) beginStep() {
	if !p.open {
		p.sum.steps++
		p.open = true
	}
}

// step is the current step number, for events.
func (p *parser) step() int { return p.base + p.sum.steps }

// modelCall records one model call; cost is priced from the pricing table
// when the format reports none.
func (p *parser) modelCall(modelName string, u trajectory.Usage, cost float64, stopReason string) error {
	if !p.open {
		p.sum.steps++
	}
	p.open = false
	if cost == 0 && p.pricing != nil && modelName != "" {
		if c, ok := p.pricing.Cost(modelName, u); ok {
			cost = c
		}
	}
	p.sum.usage = p.sum.usage.Add(u)
	p.sum.costUSD += cost
	return p.emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: p.step(), ModelCall: &trajectory.ModelCall{
		Model: modelName, Usage: u, CostUSD: cost, StopReason: stopReason, Role: "agent",
	}})
}

func (p *parser) message(role, content string, calls []trajectory.ToolCall) error {
	if content == "" && len(calls) == 0 {
		return nil
	}
	return p.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: p.step(), Message: &trajectory.Message{
		Role: role, Content: capText(content), ToolCalls: calls,
	}})
}

func (p *parser) toolCall(c trajectory.ToolCall) error {
	if p.calls == nil {
		p.calls = map[string]string{}
	}
	p.calls[c.ID] = c.Name
	return p.emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: p.step(), ToolCall: &c})
}

// toolResult records a tool's result; name is looked up from the call when
// empty.
func (p *parser) toolResult(id, name, output string, isError bool, exitCode *int) error {
	if name == "" {
		name = p.calls[id]
	}
	out := capText(output)
	return p.emit(trajectory.Event{Kind: trajectory.KindToolResult, Step: p.step(), ToolResult: &trajectory.ToolResult{
		CallID: id, Name: name, Output: out, IsError: isError, ExitCode: exitCode, Truncated: len(out) < len(output),
	}})
}

func (p *parser) logf(format string, args ...any) error {
	return p.emit(trajectory.Event{Kind: trajectory.KindLog, Step: p.step(), Log: &trajectory.Log{Text: capText(fmt.Sprintf(format, args...))}})
}

// unreadable counts a line that is not an event of the format.
func (p *parser) unreadable(line []byte, why string) {
	p.sum.unreadable++
	if p.sum.unreadable == 1 {
		s := string(line)
		if len(s) > 120 {
			s = s[:120] + "…"
		}
		p.sum.firstUnreadable = fmt.Sprintf("%q: %s", s, why)
	}
}

// eachLine calls fn for each non-blank line of r. Lines longer than maxLine
// are not held in memory: they are counted as unreadable and skipped.
func (p *parser) eachLine(r io.Reader, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !tooLong && len(long)+len(chunk) > maxLine {
				tooLong, long = true, nil
			}
			if !tooLong {
				long = append(long, chunk...)
			}
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return fmt.Errorf("reading the agent's output: %w", err)
		}
		line := chunk
		if long != nil || tooLong {
			if !tooLong && len(long)+len(chunk) > maxLine {
				tooLong = true
			}
			if tooLong {
				p.unreadable([]byte("(a line longer than the line limit)"), fmt.Sprintf("longer than %d bytes", maxLine))
			} else {
				line = append(long, chunk...)
			}
			long = nil
		}
		if !tooLong {
			if line = bytes.TrimSpace(line); len(line) > 0 {
				if ferr := fn(line); ferr != nil {
					return ferr
				}
			}
		}
		tooLong = false
		if err != nil { // io.EOF
			return nil
		}
	}
}

// capText cuts s at maxText bytes (on a rune boundary).
func capText(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n…[%d bytes cut]", len(s)-cut)
}

// textOf extracts the text of a content value in the shapes agent formats
// use: a string; an array of parts ({type: text, text} or strings); an
// object with content or text.
func textOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	case '[':
		var parts []json.RawMessage
		if json.Unmarshal(raw, &parts) != nil {
			return ""
		}
		var texts []string
		for _, part := range parts {
			if t := textOf(part); t != "" {
				texts = append(texts, t)
			}
		}
		return strings.Join(texts, "\n")
	case '{':
		var o struct {
			Type    string          `json:"type"`
			Text    *string         `json:"text"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &o) != nil {
			return ""
		}
		if o.Text != nil && (o.Type == "" || o.Type == "text" || o.Type == "output_text" || o.Type == "input_text") {
			return *o.Text
		}
		return textOf(o.Content)
	}
	return ""
}

// rawOr returns raw, or the JSON of an empty object when raw is empty, so
// tool arguments are always a JSON value.
func rawOr(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{}`)
	}
	return raw
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// Summary is what an agent's output in a format adds up to.
type Summary struct {
	// Output is the agent's final answer.
	Output     string
	Steps      int
	Usage      trajectory.Usage
	CostUSD    float64
	StopReason string
	StopDetail string
	// Unreadable counts lines that were not events of the format.
	Unreadable int
}

// ParseOutput reads out, an agent's standard output in format (one of
// Formats()), into events passed to emit, numbering steps from 1; it is
// what Run does with a command's output, for checking a captured session.
// An error is emit's, or an unknown format.
func ParseOutput(format string, out []byte, emit func(trajectory.Event) error) (Summary, error) {
	s, err := parseFormat(format, out, &parser{emit: emit})
	return Summary{Output: s.output, Steps: s.steps, Usage: s.usage, CostUSD: s.costUSD,
		StopReason: s.stop, StopDetail: s.stopDetail, Unreadable: s.unreadable}, err
}

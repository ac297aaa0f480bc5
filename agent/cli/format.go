package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
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
	// arrived, when set, is when the byte of the output at an offset
	// arrived (the command's output streamed while it ran); events are
	// stamped with their line's arrival, not with the time of parsing.
	arrived func(offset int) time.Time

	sum   summary
	calls map[string]string
	// callAt is when each tool call's line arrived, for its result's
	// duration.
	callAt map[string]time.Time
	// open is set while a step whose model call is reported at its end
	// (a Codex turn) is under way: its events carry the step's number.
	open bool

	// now is the current line's time, prev the previous line's (zero
	// when unknown).
	now, prev time.Time
	// out holds the events until the output is read: a session total the
	// format reports at its end (Claude Code's result) is spread over the
	// model calls before they are recorded.
	out []trajectory.Event
	// weights are the model calls' output sizes (text and tool-call
	// arguments, bytes), in order, to share out output tokens the format
	// reports only as a session total.
	weights []int
	// session is the session total the format reported, if any.
	session *sessionTotal
}

// sessionTotal is a session's usage and cost as the agent reports them at
// its end (Claude Code's result event).
type sessionTotal struct {
	usage   trajectory.Usage
	costUSD float64
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
	p.reconcile()
	for _, e := range p.out {
		if err := p.emit(e); err != nil {
			return p.sum, err
		}
	}
	return p.sum, nil
}

// add records an event, stamped with its line's time when it has none.
func (p *parser) add(e trajectory.Event) error {
	if e.Time.IsZero() {
		e.Time = p.now
	}
	p.out = append(p.out, e)
	return nil
}

// sinceLine is how long since the previous line, in ms (0 when unknown):
// for a model call, the time the model took to answer what came before.
func (p *parser) sinceLine() int64 {
	if p.now.IsZero() || p.prev.IsZero() || p.now.Before(p.prev) {
		return 0
	}
	return p.now.Sub(p.prev).Milliseconds()
}

// reconcile makes the model calls add up to the trial's usage and cost.
// A session total the format reported (Claude Code's stream repeats each
// message's usage as its stream began, output_tokens 1, and gives the
// true output tokens only in its result) is shared out: input tokens the
// calls lack in proportion to their input, output tokens in proportion to
// what each call wrote. Then each call is priced (priceCalls). The trial's
// usage and cost are the calls' sums, so the trajectory's per-call rows
// add up to the trial's totals.
func (p *parser) reconcile() {
	var idx []int
	var sum trajectory.Usage
	for i, e := range p.out {
		if e.Kind == trajectory.KindModelCall && e.ModelCall != nil && e.ModelCall.Role == "agent" {
			idx = append(idx, i)
			sum = sum.Add(e.ModelCall.Usage)
		}
	}
	if len(idx) == 0 {
		if s := p.session; s != nil {
			p.sum.usage, p.sum.costUSD = s.usage, s.costUSD
		}
		return
	}
	calls := make([]*trajectory.ModelCall, len(idx))
	for i, j := range idx {
		mc := *p.out[j].ModelCall
		calls[i] = &mc
		p.out[j].ModelCall = &mc
	}
	if s := p.session; s != nil {
		if d := s.usage.InputTokens - sum.InputTokens; d > 0 {
			w := make([]int, len(calls))
			for i, c := range calls {
				w[i] = c.Usage.InputTokens
			}
			for i, n := range shareOut(d, w) {
				calls[i].Usage.InputTokens += n
			}
		}
		if d := s.usage.OutputTokens - sum.OutputTokens; d > 0 {
			w := make([]int, len(calls))
			copy(w, p.weights)
			for i, n := range shareOut(d, w) {
				calls[i].Usage.OutputTokens += n
			}
		}
	}
	p.priceCalls(calls)
	p.sum.usage, p.sum.costUSD = trajectory.Usage{}, 0
	for _, c := range calls {
		p.sum.usage = p.sum.usage.Add(c.Usage)
		p.sum.costUSD += c.CostUSD
	}
}

// priceCalls sets each call's cost. Costs the format gave per call stand.
// Else a session cost the agent reported is the trial's, split over the
// calls by their price under the spec's pricing when it prices every call,
// else by their usage (output weighted 5× input, as providers price it).
// Without a reported cost, each call is priced from the spec's pricing.
func (p *parser) priceCalls(calls []*trajectory.ModelCall) {
	for _, c := range calls {
		if c.CostUSD != 0 {
			return
		}
	}
	reported := 0.0
	if p.session != nil {
		reported = p.session.costUSD
	}
	prices := make([]float64, len(calls))
	allPriced := true
	for i, c := range calls {
		cost, ok := p.priceOf(c)
		prices[i], allPriced = cost, allPriced && ok
	}
	if reported <= 0 {
		for i, c := range calls {
			c.CostUSD = prices[i]
		}
		return
	}
	w := make([]float64, len(calls))
	var total float64
	for i, c := range calls {
		w[i] = float64(c.Usage.InputTokens + 5*c.Usage.OutputTokens)
		if allPriced {
			w[i] = prices[i]
		}
		total += w[i]
	}
	for i, c := range calls {
		if total == 0 {
			c.CostUSD = reported / float64(len(calls))
		} else {
			c.CostUSD = reported * w[i] / total
		}
	}
}

func (p *parser) priceOf(c *trajectory.ModelCall) (float64, bool) {
	if p.pricing == nil || c.Model == "" {
		return 0, false
	}
	return p.pricing.Cost(c.Model, c.Usage)
}

// shareOut splits n in proportion to weights (equally when they are all
// zero), in whole parts that add up to n (largest remainder first, ties to
// the earlier).
func shareOut(n int, weights []int) []int {
	parts := make([]int, len(weights))
	total := 0
	for _, w := range weights {
		total += max(w, 0)
	}
	if total == 0 {
		for i := range weights {
			weights[i], total = 1, len(weights)
		}
	}
	type rem struct{ i, r int }
	var rems []rem
	given := 0
	for i, w := range weights {
		w = max(w, 0)
		parts[i] = n * w / total
		given += parts[i]
		rems = append(rems, rem{i, n * w % total})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return b.r - a.r })
	for k := 0; given < n; k++ {
		parts[rems[k%len(rems)].i]++
		given++
	}
	return parts
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
//
// Its usage and cost are final only once the output is read (reconcile);
// cost is what the format reports for the call (0: priced then).
func (p *parser) modelCall(modelName string, u trajectory.Usage, cost float64, stopReason string) error {
	return p.modelCallEvent(trajectory.Event{DurationMS: p.sinceLine(), ModelCall: &trajectory.ModelCall{
		Model: modelName, Usage: u, CostUSD: cost, StopReason: stopReason,
	}}, 0)
}

// modelCallEvent records the model call e (its Time, DurationMS and
// ModelCall set as known); weight is the size of what the call wrote.
func (p *parser) modelCallEvent(e trajectory.Event, weight int) error {
	if !p.open {
		p.sum.steps++
	}
	p.open = false
	e.Kind, e.Step, e.ModelCall.Role = trajectory.KindModelCall, p.step(), "agent"
	p.weights = append(p.weights, weight)
	return p.add(e)
}

func (p *parser) message(role, content string, calls []trajectory.ToolCall) error {
	if content == "" && len(calls) == 0 {
		return nil
	}
	return p.add(trajectory.Event{Kind: trajectory.KindMessage, Step: p.step(), Message: &trajectory.Message{
		Role: role, Content: capText(content), ToolCalls: calls,
	}})
}

func (p *parser) toolCall(c trajectory.ToolCall) error {
	if p.calls == nil {
		p.calls = map[string]string{}
	}
	p.calls[c.ID] = c.Name
	if p.callAt == nil {
		p.callAt = map[string]time.Time{}
	}
	p.callAt[c.ID] = p.now
	return p.add(trajectory.Event{Kind: trajectory.KindToolCall, Step: p.step(), ToolCall: &c})
}

// toolResult records a tool's result; name is looked up from the call when
// empty.
func (p *parser) toolResult(id, name, output string, isError bool, exitCode *int) error {
	if name == "" {
		name = p.calls[id]
	}
	out := capText(output)
	// The tool ran from its call's line to its result's.
	var took int64
	if at, ok := p.callAt[id]; ok && !at.IsZero() && !p.now.IsZero() && !p.now.Before(at) {
		took = p.now.Sub(at).Milliseconds()
	}
	return p.add(trajectory.Event{Kind: trajectory.KindToolResult, Step: p.step(), DurationMS: took, ToolResult: &trajectory.ToolResult{
		CallID: id, Name: name, Output: out, IsError: isError, ExitCode: exitCode, Truncated: len(out) < len(output),
	}})
}

func (p *parser) logf(format string, args ...any) error {
	return p.add(trajectory.Event{Kind: trajectory.KindLog, Step: p.step(), Log: &trajectory.Log{Text: capText(fmt.Sprintf(format, args...))}})
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
	offset := 0 // of the byte after the chunk read
	for {
		chunk, err := br.ReadSlice('\n')
		offset += len(chunk)
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
				if p.arrived != nil {
					// The line is whole once its last byte arrived.
					p.prev, p.now = p.now, p.arrived(offset-1)
				}
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

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/trajectory"
)

// Claude Code's stream-json (claude -p --output-format stream-json
// --verbose): one JSON object per line, tagged by type.
//
//	system (subtype init)  a log event: session, model, cwd, tools
//	assistant              message is an Anthropic Messages API message.
//	                       Claude Code writes one line per content block,
//	                       repeating the message's id and usage, so a new
//	                       message id is one model_call (input_tokens +
//	                       cache_creation_input_tokens +
//	                       cache_read_input_tokens as input, output_tokens as
//	                       output: the usage as the stream began, output 1)
//	                       and one assistant message with the text blocks
//	                       and tool_use blocks as its tool calls, then a
//	                       tool_call event per call; thinking blocks are not
//	                       recorded
//	user                   tool_result blocks become tool_result events
//	                       (is_error kept); plain text a user message
//	result                 the answer (result), total_cost_usd (older
//	                       cost_usd) and the session's usage, which are
//	                       shared out over the model calls (reconcile) so
//	                       that they add up to them; subtype success is
//	                       answered,
//	                       error_max_turns max_steps, error_max_budget_usd
//	                       budget_usd, other errors agent_error; a provider
//	                       error (is_error with api_error_status or
//	                       terminal_reason api_error) or
//	                       error_during_execution fails the run (an
//	                       infrastructure error, not a score)
//
// Other lines (rate_limit_event, stream_event, …) are skipped.
func (p *parser) claude(r io.Reader) error {
	var model string
	// cur is the assistant message being read: Claude Code writes one line
	// per content block, and the message is recorded whole (one model
	// call, one assistant message with its text and tool calls) once a
	// line of another message or kind arrives.
	var cur *claudeMessage
	// lastID is the id of the message flushed last: a line of it after a
	// line of another kind continues it (see claudeMessage.cont).
	var lastID string
	flush := func() error {
		if cur == nil {
			return nil
		}
		m := cur
		cur, lastID = nil, m.id
		return p.claudeMessage(m)
	}
	err := p.eachLine(r, func(line []byte) error {
		var ev struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
			// system/init
			SessionID string   `json:"session_id"`
			Model     string   `json:"model"`
			Cwd       string   `json:"cwd"`
			Tools     []string `json:"tools"`
			// assistant, user
			Message json.RawMessage `json:"message"`
			// assistant: a message Claude Code made up from an API error
			IsAPIError bool `json:"is_api_error_message"`
			// result: set when the session ended on a provider error
			APIErrorStatus int    `json:"api_error_status"`
			TerminalReason string `json:"terminal_reason"`
			// result
			IsError      bool              `json:"is_error"`
			Result       *string           `json:"result"`
			NumTurns     int               `json:"num_turns"`
			TotalCostUSD *float64          `json:"total_cost_usd"`
			CostUSD      *float64          `json:"cost_usd"`
			Usage        *claudeUsage      `json:"usage"`
			Errors       []json.RawMessage `json:"errors"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			p.unreadable(line, err.Error())
			return nil
		}
		if ev.Type != "assistant" {
			if err := flush(); err != nil {
				return err
			}
		}
		switch ev.Type {
		case "system":
			if ev.Subtype != "init" {
				return nil
			}
			model = ev.Model
			return p.logf("claude code session %s: model %s, cwd %s, %d tools", ev.SessionID, ev.Model, ev.Cwd, len(ev.Tools))
		case "assistant":
			var m struct {
				ID      string        `json:"id"`
				Model   string        `json:"model"`
				Content []claudeBlock `json:"content"`
				Usage   *claudeUsage  `json:"usage"`
				Stop    string        `json:"stop_reason"`
			}
			if err := json.Unmarshal(ev.Message, &m); err != nil {
				p.unreadable(line, "assistant message: "+err.Error())
				return nil
			}
			if cur != nil && (m.ID == "" || m.ID != cur.id) {
				if err := flush(); err != nil {
					return err
				}
			}
			if cur == nil {
				cur = &claudeMessage{id: m.ID, model: firstNonEmpty(m.Model, model), at: p.now, took: p.sinceLine(),
					cont: m.ID != "" && m.ID == lastID}
			}
			cur.last = p.now
			cur.apiError = cur.apiError || ev.IsAPIError
			if m.Stop != "" {
				cur.stop = m.Stop
			}
			if m.Usage != nil {
				// Later lines of a message repeat its usage, or carry more of
				// it: the largest counts.
				u := m.Usage.usage()
				cur.usage.InputTokens = max(cur.usage.InputTokens, u.InputTokens)
				cur.usage.OutputTokens = max(cur.usage.OutputTokens, u.OutputTokens)
			}
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					cur.texts = append(cur.texts, b.Text)
					cur.size += len(b.Text)
				case "tool_use":
					c := trajectory.ToolCall{ID: b.ID, Name: b.Name, Arguments: rawOr(b.Input)}
					cur.calls = append(cur.calls, c)
					cur.size += len(b.Name) + len(c.Arguments)
				case "thinking":
					cur.size += len(b.Thinking)
				}
			}
		case "user":
			var m struct {
				Content json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(ev.Message, &m); err != nil {
				p.unreadable(line, "user message: "+err.Error())
				return nil
			}
			var blocks []claudeBlock
			if json.Unmarshal(m.Content, &blocks) != nil {
				return p.message(trajectory.RoleUser, textOf(m.Content), nil)
			}
			var texts []string
			for _, b := range blocks {
				switch b.Type {
				case "tool_result":
					if err := p.toolResult(b.ToolUseID, "", textOf(b.Content), b.IsError, nil); err != nil {
						return err
					}
				case "text":
					texts = append(texts, b.Text)
				}
			}
			return p.message(trajectory.RoleUser, strings.Join(texts, "\n"), nil)
		case "result":
			if ev.Result != nil {
				p.sum.output = *ev.Result
			}
			// The session's totals: shared out over the model calls when
			// the output is read (reconcile).
			st := &sessionTotal{}
			switch {
			case ev.TotalCostUSD != nil:
				st.costUSD = *ev.TotalCostUSD
			case ev.CostUSD != nil:
				st.costUSD = *ev.CostUSD
			}
			if ev.Usage != nil {
				st.usage = ev.Usage.usage()
			}
			p.session = st
			switch {
			case ev.Subtype == "success" && !ev.IsError:
				p.sum.stop = agent.StopAnswered
			case ev.Subtype == "error_max_turns":
				p.sum.stop, p.sum.stopDetail = agent.StopMaxSteps, fmt.Sprintf("claude code stopped at its turn limit after %d turns", ev.NumTurns)
			case ev.Subtype == "error_max_budget_usd":
				p.sum.stop, p.sum.stopDetail = agent.StopBudgetUSD, "claude code stopped at its budget"
			default:
				detail := "claude code reported " + ev.Subtype
				if ev.IsError && ev.Result != nil && *ev.Result != "" {
					detail = "claude code: " + *ev.Result
				}
				for _, e := range ev.Errors {
					if t := textOf(e); t != "" {
						detail += ": " + t
						break
					}
				}
				p.sum.stop, p.sum.stopDetail = StopAgentError, detail
				if ev.Subtype == "error_during_execution" || ev.APIErrorStatus != 0 || ev.TerminalReason == "api_error" {
					p.sum.failure = detail
					if ev.APIErrorStatus != 0 {
						p.sum.failure += fmt.Sprintf(" (provider status %d)", ev.APIErrorStatus)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush() // an output cut short ends on an assistant message
}

// claudeMessage is one assistant message of Claude Code's stream, gathered
// from its lines.
type claudeMessage struct {
	id, model, stop string
	usage           trajectory.Usage
	texts           []string
	calls           []trajectory.ToolCall
	apiError        bool
	// at is when its first line arrived, last its last; took is the time
	// from the line before it (the model's answer time, as the stream
	// shows it).
	at, last time.Time
	took     int64
	// size is what it wrote (bytes of text, thinking and tool calls).
	size int
	// cont: the lines continue a message already recorded. Claude Code may
	// run a tool, and write its result, while the message that asked for
	// it still streams its next tool_use block; those blocks are the same
	// model call, not another one.
	cont bool
}

// claudeMessage records m: its model call, its assistant message with text
// and tool calls together, and a tool_call event per call.
func (p *parser) claudeMessage(m *claudeMessage) error {
	if m.cont && len(p.weights) > 0 {
		// Its model call is recorded; what it wrote weighs on that call.
		p.weights[len(p.weights)-1] += m.size
	} else if err := p.modelCallEvent(trajectory.Event{Time: m.at, DurationMS: m.took, ModelCall: &trajectory.ModelCall{
		Model: m.model, Usage: m.usage, StopReason: m.stop, ResponseID: m.id,
	}}, m.size); err != nil {
		return err
	}
	text := strings.Join(m.texts, "\n")
	if text != "" || len(m.calls) > 0 {
		if err := p.add(trajectory.Event{Kind: trajectory.KindMessage, Step: p.step(), Time: m.last, Message: &trajectory.Message{
			Role: trajectory.RoleAssistant, Content: capText(text), ToolCalls: m.calls,
		}}); err != nil {
			return err
		}
	}
	if m.apiError {
		p.sum.lastError = "claude code: " + text
	} else if text != "" {
		p.sum.output = text
	}
	now := p.now
	p.now = m.last
	defer func() { p.now = now }()
	for _, c := range m.calls {
		if err := p.toolCall(c); err != nil {
			return err
		}
	}
	return nil
}

type claudeBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// thinking
	Thinking string `json:"thinking"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type claudeUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

func (u claudeUsage) usage() trajectory.Usage {
	return trajectory.Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

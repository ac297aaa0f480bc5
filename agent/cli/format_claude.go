package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
//	                       message id is one model_call (usage counted once:
//	                       input_tokens + cache_creation_input_tokens +
//	                       cache_read_input_tokens as input, output_tokens as
//	                       output); text blocks become an assistant message,
//	                       tool_use blocks its tool calls and tool_call events;
//	                       thinking blocks are not recorded
//	user                   tool_result blocks become tool_result events
//	                       (is_error kept); plain text a user message
//	result                 the answer (result), total_cost_usd (older
//	                       cost_usd), the session's usage, which replace the
//	                       per-call sums; subtype success is answered,
//	                       error_max_turns max_steps, error_max_budget_usd
//	                       budget_usd, other errors agent_error; a provider
//	                       error (is_error with api_error_status or
//	                       terminal_reason api_error) or
//	                       error_during_execution fails the run (an
//	                       infrastructure error, not a score)
//
// Other lines (rate_limit_event, stream_event, …) are skipped.
func (p *parser) claude(r io.Reader) error {
	lastID := ""
	var model string
	return p.eachLine(r, func(line []byte) error {
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
			if m.ID == "" || m.ID != lastID {
				lastID = m.ID
				var u trajectory.Usage
				if m.Usage != nil {
					u = m.Usage.usage()
				}
				if err := p.modelCall(firstNonEmpty(m.Model, model), u, 0, m.Stop); err != nil {
					return err
				}
			}
			var texts []string
			var calls []trajectory.ToolCall
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "tool_use":
					calls = append(calls, trajectory.ToolCall{ID: b.ID, Name: b.Name, Arguments: rawOr(b.Input)})
				}
			}
			if err := p.message(trajectory.RoleAssistant, strings.Join(texts, "\n"), calls); err != nil {
				return err
			}
			if ev.IsAPIError {
				p.sum.lastError = "claude code: " + strings.Join(texts, "\n")
			} else if len(texts) > 0 {
				p.sum.output = strings.Join(texts, "\n")
			}
			for _, c := range calls {
				if err := p.toolCall(c); err != nil {
					return err
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
			switch {
			case ev.TotalCostUSD != nil:
				p.sum.costUSD = *ev.TotalCostUSD
			case ev.CostUSD != nil:
				p.sum.costUSD = *ev.CostUSD
			}
			if ev.Usage != nil {
				if u := ev.Usage.usage(); u.Total() > 0 {
					p.sum.usage = u
				}
			}
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
}

type claudeBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
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

package cli

import (
	"encoding/json"
	"io"
	"time"

	"evals.si/agent"
	"evals.si/trajectory"
)

// DeepSeek Harness's session events (dsh-json): JSONL in the session log's
// envelope {type, seq, time, data}. DeepSeek Harness documents no JSON run
// output of its own; this reads the session event envelope of its core
// (packages/core/session), which its JSON-RPC runtime also streams. The
// format is unstable upstream, so unknown types are skipped, not refused.
//
//	user/message {message}               a user message
//	assistant/message {turn, step,        one model_call (usage when present:
//	  message, usage?, interrupted?}       input_tokens/output_tokens,
//	                                       prompt_tokens/completion_tokens or
//	                                       inputTokens/outputTokens; the model
//	                                       from data.model or message.model)
//	                                       and an assistant message; the last
//	                                       one's text is the answer
//	tool/call {callId, name, arguments}   a tool_call event
//	tool/result {message, error?, meta?}  a tool_result event: the call id from
//	                                       data.callId or message.callId /
//	                                       toolCallId, is_error when error is set
//	turn/end {turn, reason{kind}}         completed is answered; any other kind
//	                                       (aborted, blocked, error, max-tokens,
//	                                       interrupted) is agent_error; error
//	                                       fails the run (an infrastructure
//	                                       error, not a score)
//
// An event's time, when it parses as RFC 3339 or Unix milliseconds, is kept
// as the event's time. turn/start, step/start, step/end, assistant/chunk
// (streamed pieces of the assistant/message that follows), todo/write,
// request/header, request/context and session/end-seed are skipped.
func (p *parser) dsh(r io.Reader) error {
	var lastAt time.Time
	return p.eachLine(r, func(line []byte) error {
		var ev struct {
			Type string          `json:"type"`
			Seq  int             `json:"seq"`
			Time json.RawMessage `json:"time"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
			why := "no type"
			if err != nil {
				why = err.Error()
			}
			p.unreadable(line, why)
			return nil
		}
		if at := dshTime(ev.Time); !at.IsZero() {
			// The event's own time wins over its line's arrival, and
			// durations are measured on that clock.
			p.prev, p.now, lastAt = lastAt, at, at
		}

		var d struct {
			Model       string          `json:"model"`
			Message     json.RawMessage `json:"message"`
			Usage       *dshUsage       `json:"usage"`
			Interrupted bool            `json:"interrupted"`
			CallID      string          `json:"callId"`
			Name        string          `json:"name"`
			Arguments   json.RawMessage `json:"arguments"`
			Error       *struct {
				Name string          `json:"name"`
				Code json.RawMessage `json:"code"`
			} `json:"error"`
			Reason *struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			} `json:"reason"`
		}
		if len(ev.Data) > 0 {
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				p.unreadable(line, "data: "+err.Error())
				return nil
			}
		}
		var msg struct {
			Model      string `json:"model"`
			CallID     string `json:"callId"`
			ToolCallID string `json:"toolCallId"`
			Name       string `json:"name"`
		}
		_ = json.Unmarshal(d.Message, &msg) // a message that is not an object has none of these
		switch ev.Type {
		case "user/message":
			return p.message(trajectory.RoleUser, textOf(d.Message), nil)
		case "assistant/message":
			var u trajectory.Usage
			if d.Usage != nil {
				u = d.Usage.usage()
			}
			stop := ""
			if d.Interrupted {
				stop = "interrupted"
			}
			if err := p.modelCall(firstNonEmpty(d.Model, msg.Model), u, 0, stop); err != nil {
				return err
			}
			text := textOf(d.Message)
			if text != "" {
				p.sum.output = text
			}
			return p.message(trajectory.RoleAssistant, text, nil)
		case "tool/call":
			return p.toolCall(trajectory.ToolCall{ID: d.CallID, Name: d.Name, Arguments: rawOr(d.Arguments)})
		case "tool/result":
			id := firstNonEmpty(d.CallID, msg.CallID, msg.ToolCallID)
			out := textOf(d.Message)
			if d.Error != nil && out == "" {
				out = d.Error.Name
			}
			return p.toolResult(id, firstNonEmpty(d.Name, msg.Name), out, d.Error != nil, nil)
		case "turn/end":
			kind := ""
			if d.Reason != nil {
				kind = d.Reason.Kind
			}
			if kind == "completed" {
				p.sum.stop, p.sum.stopDetail = agent.StopAnswered, ""
			} else {
				detail := "deepseek harness turn ended: " + kind
				if d.Reason != nil && d.Reason.Message != "" {
					detail += ": " + d.Reason.Message
				}
				p.sum.stop, p.sum.stopDetail = StopAgentError, detail
				if kind == "error" {
					p.sum.failure = detail
				}
			}
		}
		return nil
	})
}

type dshUsage struct {
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	InputTokensCC    int `json:"inputTokens"`
	OutputTokensCC   int `json:"outputTokens"`
}

func (u dshUsage) usage() trajectory.Usage {
	return trajectory.Usage{
		InputTokens:  u.InputTokens + u.PromptTokens + u.InputTokensCC,
		OutputTokens: u.OutputTokens + u.CompletionTokens + u.OutputTokensCC,
	}
}

// dshTime reads an event time: an RFC 3339 string or Unix milliseconds.
func dshTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
		return time.Time{}
	}
	var ms int64
	if json.Unmarshal(raw, &ms) == nil && ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"evals.si/agent"
	"evals.si/trajectory"
)

// Codex's codex exec --json: JSONL tagged by type.
//
//	thread.started {thread_id}       a log event
//	turn.started                     opens a step (events carry its number)
//	turn.completed {usage}           one model_call per turn (Codex does not
//	                                 report its model calls one by one):
//	                                 input_tokens (cached_input_tokens are a
//	                                 part of them) and output_tokens
//	turn.failed {error{message}}     stop agent_error with the message; the
//	                                 run failed (an infrastructure error)
//	error {message}                  a log event; a provider error when
//	                                 the command then exits non-zero
//	item.started {item}              tool-like items: the tool_call event
//	item.completed {item}            by item.type:
//	  agent_message {text}           an assistant message; the last is the answer
//	  command_execution              tool_call "command_execution" {command},
//	    {command, aggregated_output,   tool_result with the output, exit code,
//	     exit_code, status}            is_error unless completed with exit 0
//	  file_change {changes, status}  tool_call "file_change" {changes}, result
//	                                 listing "kind path"
//	  mcp_tool_call {server, tool,   tool_call "server.tool" with the
//	    arguments, result, error}      arguments, result's text or the error
//	  web_search {query}             tool_call "web_search" {query}, empty result
//	  collab_tool_call               tool_call "collab_tool_call" with the item
//	  error {message}                a log event
//	  reasoning, plan, todo_list     not recorded
//	request_user_input               a log event (exec cannot answer it)
//
// item.updated and item.plan.delta are skipped.
func (p *parser) codex(r io.Reader) error {
	started := map[string]bool{}
	return p.eachLine(r, func(line []byte) error {
		var ev struct {
			Type     string          `json:"type"`
			ThreadID string          `json:"thread_id"`
			Usage    *codexUsage     `json:"usage"`
			Error    *codexError     `json:"error"`
			Message  string          `json:"message"`
			Item     json.RawMessage `json:"item"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			p.unreadable(line, err.Error())
			return nil
		}
		switch ev.Type {
		case "thread.started":
			return p.logf("codex thread %s", ev.ThreadID)
		case "turn.started":
			p.beginStep()
		case "turn.completed":
			var u trajectory.Usage
			if ev.Usage != nil {
				u = trajectory.Usage{InputTokens: ev.Usage.InputTokens, OutputTokens: ev.Usage.OutputTokens}
			}
			if err := p.modelCall("", u, 0, ""); err != nil {
				return err
			}
			if p.sum.stop == "" {
				p.sum.stop = agent.StopAnswered
			}
		case "turn.failed":
			msg := "turn failed"
			if ev.Error != nil && ev.Error.Message != "" {
				msg = ev.Error.Message
			}
			p.sum.stop, p.sum.stopDetail = StopAgentError, "codex: "+msg
			p.sum.failure = "codex: " + msg
			if p.open {
				// The turn's calls were made; Codex reports no usage for them.
				return p.modelCall("", trajectory.Usage{}, 0, "failed")
			}
		case "error":
			p.sum.lastError = "codex: " + ev.Message
			return p.logf("codex error: %s", ev.Message)
		case "request_user_input":
			return p.logf("codex asked for user input, which codex exec cannot give: %s", line)
		case "item.started", "item.completed":
			var it codexItem
			if err := json.Unmarshal(ev.Item, &it); err != nil {
				p.unreadable(line, "item: "+err.Error())
				return nil
			}
			call, ok := it.call()
			if ev.Type == "item.started" {
				if ok && !started[it.ID] {
					started[it.ID] = true
					return p.toolCall(call)
				}
				return nil
			}
			if ok && !started[it.ID] {
				started[it.ID] = true
				if err := p.toolCall(call); err != nil {
					return err
				}
			}
			return p.codexCompleted(it, call.Name)
		}
		return nil
	})
}

func (p *parser) codexCompleted(it codexItem, name string) error {
	switch it.Type {
	case "agent_message":
		p.sum.output = it.Text
		return p.message(trajectory.RoleAssistant, it.Text, nil)
	case "command_execution":
		failed := it.Status != "completed" || (it.ExitCode != nil && *it.ExitCode != 0)
		return p.toolResult(it.ID, name, it.AggregatedOutput, failed, it.ExitCode)
	case "file_change":
		var lines []string
		for _, c := range it.Changes {
			lines = append(lines, c.Kind+" "+c.Path)
		}
		return p.toolResult(it.ID, name, strings.Join(lines, "\n"), it.Status != "completed", nil)
	case "mcp_tool_call":
		if it.Error != nil {
			return p.toolResult(it.ID, name, it.Error.Message, true, nil)
		}
		out := ""
		if it.Result != nil {
			out = textOf(it.Result.Content)
			if out == "" && len(it.Result.StructuredContent) > 0 {
				out = string(it.Result.StructuredContent)
			}
		}
		return p.toolResult(it.ID, name, out, it.Status == "failed", nil)
	case "web_search", "collab_tool_call":
		return p.toolResult(it.ID, name, "", it.Status == "failed", nil)
	case "error":
		return p.logf("codex error: %s", it.Message)
	}
	return nil
}

type codexUsage struct {
	InputTokens       int `json:"input_tokens"`
	CachedInputTokens int `json:"cached_input_tokens"`
	OutputTokens      int `json:"output_tokens"`
}

type codexError struct {
	Message string `json:"message"`
}

type codexItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	// agent_message, reasoning, plan
	Text string `json:"text"`
	// command_execution
	Command          string `json:"command"`
	AggregatedOutput string `json:"aggregated_output"`
	ExitCode         *int   `json:"exit_code"`
	// file_change
	Changes []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	// mcp_tool_call
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structured_content"`
	} `json:"result"`
	Error *codexError `json:"error"`
	// web_search
	Query string `json:"query"`
	// error
	Message string `json:"message"`
}

// call is the tool call an item stands for, if it is one.
func (it codexItem) call() (trajectory.ToolCall, bool) {
	c := trajectory.ToolCall{ID: it.ID, Name: it.Type}
	switch it.Type {
	case "command_execution":
		c.Arguments = mustJSON(map[string]string{"command": it.Command})
	case "file_change":
		c.Arguments = mustJSON(map[string]any{"changes": it.Changes})
	case "mcp_tool_call":
		c.Name = fmt.Sprintf("%s.%s", it.Server, it.Tool)
		c.Arguments = rawOr(it.Arguments)
	case "web_search":
		c.Arguments = mustJSON(map[string]string{"query": it.Query})
	case "collab_tool_call":
		c.Arguments = json.RawMessage(`{}`)
	default:
		return trajectory.ToolCall{}, false
	}
	return c, true
}

package modelserver

import (
	"encoding/json"
	"net/http"

	"evals.si/model"
)

// messagesRequest is the part of an Anthropic Messages request the server
// reads.
type messagesRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Stream   bool          `json:"stream"`
}

// messages serves POST /v1/messages (also ?beta=true, as Claude Code sends).
// Streaming follows the documented event order: message_start, then per
// block content_block_start, content_block_delta (text_delta or
// input_json_delta), content_block_stop, then message_delta with the stop
// reason and usage, and message_stop.
func (s *Server) messages(w http.ResponseWriter, r *http.Request, body []byte) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, dialectAnthropic, http.StatusBadRequest, "decoding messages request: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, dialectAnthropic, http.StatusBadRequest, "messages: at least one message is required")
		return
	}
	first, turns := messagesShape(req.Messages)
	c, ok := s.reply(w, r, dialectAnthropic, body, first, turns)
	if !ok {
		return
	}
	id := s.nextID("msg_scripted_")
	mdl := req.Model
	if mdl == "" {
		mdl = model.ScriptedModel
	}
	stop := "end_turn"
	if len(c.Calls) > 0 {
		stop = "tool_use"
	}
	var blocks []map[string]any
	if c.Content != "" || len(c.Calls) == 0 {
		blocks = append(blocks, map[string]any{"type": "text", "text": c.Content})
	}
	for _, tc := range c.Calls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.id("toolu"), "name": tc.Name, "input": json.RawMessage(tc.Arguments)})
	}
	usage := map[string]any{
		"input_tokens": c.Usage.InputTokens, "output_tokens": c.Usage.OutputTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
	}
	msg := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": mdl,
		"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, msg)
		return
	}

	e := startSSE(w)
	start := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": mdl,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": c.Usage.InputTokens, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		},
	}
	e.send("message_start", map[string]any{"type": "message_start", "message": start})
	e.send("ping", map[string]any{"type": "ping"})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range pieces(c.Content, 16) {
				e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			e.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			for _, p := range pieces(string(b["input"].(json.RawMessage)), 16) {
				e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.send("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"input_tokens": c.Usage.InputTokens, "output_tokens": c.Usage.OutputTokens},
	})
	e.send("message_stop", map[string]any{"type": "message_stop"})
}

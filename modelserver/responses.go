package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"evals.si/model"
)

// responsesRequest is the part of a Responses API request the server reads.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       json.RawMessage `json:"instructions"`
	Tools              json.RawMessage `json:"tools"`
	PreviousResponseID string          `json:"previous_response_id"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
}

// inputItem is the part of an input or output item the server reads.
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responses serves POST /v1/responses. previous_response_id continues a
// conversation the server remembers (input and output items of every
// stored response); store: false responses are not remembered, as with the
// real API.
func (s *Server) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, dialectOpenAI, http.StatusBadRequest, "decoding responses request: "+err.Error())
		return
	}
	input, err := inputItems(req.Input)
	if err != nil {
		writeError(w, dialectOpenAI, http.StatusBadRequest, err.Error())
		return
	}
	var conv []json.RawMessage
	if req.PreviousResponseID != "" {
		s.mu.Lock()
		prev, ok := s.convs[req.PreviousResponseID]
		s.mu.Unlock()
		if !ok {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
				"message": fmt.Sprintf("Previous response with id '%s' not found.", req.PreviousResponseID),
				"type":    "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found",
			}})
			return
		}
		conv = append(conv, prev...)
	}
	conv = append(conv, input...)
	first, turns := conversationShape(conv)

	c, ok := s.reply(w, r, dialectOpenAI, body, first, turns)
	if !ok {
		return
	}
	id := s.nextID("resp_scripted_")
	mdl := req.Model
	if mdl == "" {
		mdl = model.ScriptedModel
	}

	var output []map[string]any
	if c.Content != "" || len(c.Calls) == 0 {
		output = append(output, map[string]any{
			"type": "message", "id": "msg_" + strings.TrimPrefix(id, "resp_"), "status": "completed", "role": "assistant",
			"content": []any{outputText(c.Content)},
		})
	}
	for _, tc := range c.Calls {
		output = append(output, map[string]any{
			"type": "function_call", "id": tc.id("fc"), "call_id": model.ScriptToolCallID(tc.Step, tc.Index),
			"name": tc.Name, "arguments": tc.Arguments, "status": "completed",
		})
	}
	if req.Store == nil || *req.Store {
		stored := append([]json.RawMessage(nil), conv...)
		for _, o := range output {
			b, _ := json.Marshal(o)
			stored = append(stored, b)
		}
		s.mu.Lock()
		s.convs[id] = stored
		s.mu.Unlock()
	}

	created := time.Now().Unix()
	resp := func(status string, out []map[string]any, withUsage bool) map[string]any {
		m := map[string]any{
			"id": id, "object": "response", "created_at": created, "status": status, "model": mdl,
			"output": out, "usage": nil, "error": nil, "incomplete_details": nil,
			"instructions": rawOrNull(req.Instructions), "tools": rawOrEmpty(req.Tools),
			"previous_response_id": nil, "parallel_tool_calls": true, "tool_choice": "auto",
			"metadata": map[string]any{}, "temperature": 1.0, "top_p": 1.0, "truncation": "disabled",
			"text":  map[string]any{"format": map[string]any{"type": "text"}},
			"store": req.Store == nil || *req.Store,
		}
		if req.PreviousResponseID != "" {
			m["previous_response_id"] = req.PreviousResponseID
		}
		if withUsage {
			m["usage"] = map[string]any{
				"input_tokens": c.Usage.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": c.Usage.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
				"total_tokens": c.Usage.Total(),
			}
		}
		if out == nil {
			m["output"] = []any{}
		}
		return m
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, resp("completed", output, true))
		return
	}

	e := startSSE(w)
	seq := 0
	send := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		e.send(typ, fields)
	}
	send("response.created", map[string]any{"response": resp("in_progress", nil, false)})
	send("response.in_progress", map[string]any{"response": resp("in_progress", nil, false)})
	for i, item := range output {
		itemID := item["id"]
		switch item["type"] {
		case "message":
			send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"type": "message", "id": itemID, "status": "in_progress", "role": "assistant", "content": []any{},
			}})
			send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": outputText("")})
			for _, p := range pieces(c.Content, 16) {
				send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
			}
			send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": c.Content, "logprobs": []any{}})
			send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": outputText(c.Content)})
		case "function_call":
			args := item["arguments"].(string)
			send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"type": "function_call", "id": itemID, "call_id": item["call_id"], "name": item["name"], "arguments": "", "status": "in_progress",
			}})
			for _, p := range pieces(args, 16) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": p})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "name": item["name"], "arguments": args})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": resp("completed", output, true)})
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// inputItems normalises input: a string is one user message.
func inputItems(raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, _ := json.Marshal(map[string]any{"type": "message", "role": "user", "content": s})
		return []json.RawMessage{b}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("input must be a string or a list of items: %v", err)
	}
	return items, nil
}

// conversationShape returns the opening user text (see openingText) and the number
// of assistant turns: runs of consecutive model-produced items (assistant
// messages, function calls, reasoning) count as one turn each, since one
// response can hold several of them.
func conversationShape(conv []json.RawMessage) (first string, turns int) {
	var opening []string
	inTurn := false
	for _, raw := range conv {
		var it inputItem
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		isMessage := it.Type == "" || it.Type == "message"
		if isMessage && it.Role == "user" && turns == 0 {
			opening = append(opening, textOf(it.Content))
		}
		produced := (isMessage && it.Role == "assistant") || it.Type == "reasoning" ||
			(strings.HasSuffix(it.Type, "_call") && !strings.HasSuffix(it.Type, "_output"))
		if produced && !inTurn {
			turns++
		}
		inTurn = produced
	}
	return openingText(opening), turns
}

func rawOrNull(r json.RawMessage) any {
	if len(bytes.TrimSpace(r)) == 0 {
		return nil
	}
	return r
}

func rawOrEmpty(r json.RawMessage) any {
	if len(bytes.TrimSpace(r)) == 0 || bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
		return []any{}
	}
	return r
}

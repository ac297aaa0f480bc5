package modelserver

import (
	"encoding/json"
	"net/http"
	"time"

	"evals.si/model"
)

// chatRequest is the part of a Chat Completions request the server reads.
type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// chatCompletions serves POST /v1/chat/completions.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, dialectOpenAI, http.StatusBadRequest, "decoding chat completion request: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, dialectOpenAI, http.StatusBadRequest, "messages: at least one message is required")
		return
	}
	first, turns := messagesShape(req.Messages)
	c, ok := s.reply(w, r, dialectOpenAI, body, first, turns)
	if !ok {
		return
	}
	id, created := s.nextID("chatcmpl-"), time.Now().Unix()
	mdl := req.Model
	if mdl == "" {
		mdl = model.ScriptedModel
	}
	finish := "stop"
	if len(c.Calls) > 0 {
		finish = "tool_calls"
	}
	usage := chatUsage{PromptTokens: c.Usage.InputTokens, CompletionTokens: c.Usage.OutputTokens, TotalTokens: c.Usage.Total()}

	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if c.Content != "" || len(c.Calls) == 0 {
			msg["content"] = c.Content
		}
		if len(c.Calls) > 0 {
			tcs := make([]chatToolCall, len(c.Calls))
			for i, tc := range c.Calls {
				tcs[i].ID, tcs[i].Type = model.ScriptToolCallID(tc.Step, tc.Index), "function"
				tcs[i].Function.Name, tcs[i].Function.Arguments = tc.Name, tc.Arguments
			}
			msg["tool_calls"] = tcs
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": mdl,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}

	e := startSSE(w)
	chunk := func(delta map[string]any, finish any) {
		e.send("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": mdl,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, p := range pieces(c.Content, 16) {
		chunk(map[string]any{"content": p}, nil)
	}
	for i, tc := range c.Calls {
		head := chatToolCall{Index: &i, ID: model.ScriptToolCallID(tc.Step, tc.Index), Type: "function"}
		head.Function.Name = tc.Name
		chunk(map[string]any{"tool_calls": []chatToolCall{head}}, nil)
		for _, p := range pieces(tc.Arguments, 16) {
			var d chatToolCall
			d.Index = &i
			d.Function.Arguments = p
			chunk(map[string]any{"tool_calls": []chatToolCall{d}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		e.send("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": mdl,
			"choices": []any{}, "usage": usage,
		})
	}
	e.send("", "[DONE]")
}

// wireMessage is a chat message as Chat Completions and Messages requests
// carry it; content is a string or a list of parts.
type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesShape returns what script selection needs from a message list:
// the opening user text (see openingText) and how many assistant turns came
// before.
func messagesShape(msgs []wireMessage) (first string, turns int) {
	var opening []string
	for _, m := range msgs {
		switch m.Role {
		case "user":
			if turns == 0 {
				opening = append(opening, textOf(m.Content))
			}
		case "assistant":
			turns++
		}
	}
	return openingText(opening), turns
}

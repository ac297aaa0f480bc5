package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"evals.si/spec"
	"evals.si/trajectory"
)

// openaiConnector speaks Chat Completions to any OpenAI-compatible base_url.
//
// Retries are the SDK's own (one layer only): it retries 408, 409, 429, 5xx
// and transport errors with exponential backoff and jitter, honouring
// Retry-After / Retry-After-Ms, up to ModelRef.MaxRetries.
type openaiConnector struct {
	svc    openai.ChatCompletionService
	ref    spec.ModelRef
	base   string
	set    callSettings
	stream bool
}

func newOpenAI(ref spec.ModelRef, opts Options) (*openaiConnector, error) {
	key, err := apiKey(ref, opts, DefaultOpenAIKeyEnv)
	if err != nil {
		return nil, err
	}
	base := ref.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	set := settingsOf(ref)
	// The service is built from explicit options only: openai.NewClient would
	// also read OPENAI_BASE_URL, OPENAI_ORG_ID and friends from the process
	// environment, which must not leak into a run.
	svc := openai.NewChatCompletionService(
		option.WithHTTPClient(opts.HTTPClient),
		option.WithBaseURL(base),
		option.WithAPIKey(key),
		option.WithMaxRetries(set.maxRetries),
		option.WithMiddleware(attemptLogger(opts.Logger, ConnectorOpenAI, set.maxRetries)),
	)
	return &openaiConnector{svc: svc, ref: ref, base: base, set: set, stream: opts.Stream}, nil
}

func (c *openaiConnector) Chat(ctx context.Context, req Request) (Response, error) {
	params, err := c.params(req)
	if err != nil {
		return Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.set.timeout)
	defer cancel()

	var cc *openai.ChatCompletion
	if c.stream {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.svc.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		err = stream.Err()
		_ = stream.Close()
		cc = &acc.ChatCompletion
	} else {
		cc, err = c.svc.New(ctx, params)
	}
	if err != nil {
		return Response{}, c.callError(string(params.Model), err)
	}
	return fromOpenAI(cc)
}

// callError names the model and endpoint, and says when retries were spent.
func (c *openaiConnector) callError(model string, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) && retryableStatus(apiErr.StatusCode) {
		return fmt.Errorf("openai chat completion for model %q at %s failed after %d retries: %w", model, c.base, c.set.maxRetries, err)
	}
	return fmt.Errorf("openai chat completion for model %q at %s: %w", model, c.base, err)
}

func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code == http.StatusConflict || code >= 500
}

func (c *openaiConnector) params(req Request) (openai.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = c.ref.Model
	}
	if model == "" {
		return openai.ChatCompletionNewParams{}, errors.New("openai connector: no model set (set model in the model reference)")
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(model)}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case trajectory.RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case trajectory.RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case trajectory.RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case trajectory.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Arguments)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return p, fmt.Errorf("openai connector: message %d has unknown role %q (want system, user, assistant or tool)", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		params, err := schemaObject(t)
		if err != nil {
			return p, err
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(params)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if n := firstPositive(req.MaxTokens, c.ref.MaxTokens); n > 0 {
		// max_completion_tokens is the current field; o-series and gpt-5
		// models reject the older max_tokens.
		p.MaxCompletionTokens = openai.Int(int64(n))
	}
	if t := firstTemp(req.Temperature, c.ref.Temperature); t != nil {
		p.Temperature = openai.Float(*t)
	}
	return p, nil
}

func fromOpenAI(cc *openai.ChatCompletion) (Response, error) {
	if len(cc.Choices) == 0 {
		return Response{}, fmt.Errorf("openai chat completion %q returned no choices", cc.ID)
	}
	ch := cc.Choices[0]
	msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: ch.Message.Content}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		msg.ToolCalls = append(msg.ToolCalls, trajectory.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: rawArguments(tc.Function.Arguments)})
	}
	return Response{
		Message:    msg,
		Usage:      trajectory.Usage{InputTokens: int(cc.Usage.PromptTokens), OutputTokens: int(cc.Usage.CompletionTokens)},
		StopReason: ch.FinishReason,
		Model:      cc.Model,
		ID:         cc.ID,
	}, nil
}

// rawArguments keeps a model's argument text as JSON. Models sometimes emit
// malformed arguments; those are kept as a JSON string so the trajectory
// stays valid JSON and the agent can report the problem back.
func rawArguments(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// schemaObject decodes a tool's JSON Schema; an absent schema is an object
// with no properties.
func schemaObject(t Tool) (map[string]any, error) {
	if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(t.Parameters, &m); err != nil {
		return nil, fmt.Errorf("tool %q: parameters must be a JSON Schema object: %w", t.Name, err)
	}
	return m, nil
}

func firstPositive(v ...int) int {
	for _, x := range v {
		if x > 0 {
			return x
		}
	}
	return 0
}

func firstTemp(v ...*float64) *float64 {
	for _, x := range v {
		if x != nil {
			return x
		}
	}
	return nil
}

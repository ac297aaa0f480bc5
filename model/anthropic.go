package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"evals.si/spec"
	"evals.si/trajectory"
)

// anthropicConnector speaks the Anthropic Messages API.
//
// Retries are the SDK's own (one layer only): 408, 409, 429, 5xx and
// transport errors, exponential backoff with jitter, Retry-After honoured,
// up to ModelRef.MaxRetries.
type anthropicConnector struct {
	msgs   anthropic.MessageService
	ref    spec.ModelRef
	base   string
	set    callSettings
	stream bool
}

func newAnthropic(ref spec.ModelRef, opts Options) (*anthropicConnector, error) {
	key, err := apiKey(ref, opts, DefaultAnthropicKeyEnv)
	if err != nil {
		return nil, err
	}
	base := ref.BaseURL
	if base == "" {
		base = DefaultAnthropicURL
	}
	set := settingsOf(ref)
	// WithoutEnvironmentDefaults keeps ANTHROPIC_AUTH_TOKEN, ANTHROPIC_BASE_URL
	// and profiles in the process environment out of the call: only the key
	// the ModelRef names is sent.
	client := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(opts.HTTPClient),
		option.WithBaseURL(base),
		option.WithAPIKey(key),
		option.WithMaxRetries(set.maxRetries),
		option.WithMiddleware(attemptLogger(opts.Logger, ConnectorAnthropic, set.maxRetries)),
	)
	return &anthropicConnector{msgs: client.Messages, ref: ref, base: base, set: set, stream: opts.Stream}, nil
}

func (c *anthropicConnector) Chat(ctx context.Context, req Request) (Response, error) {
	params, callOpts, err := c.params(req)
	if err != nil {
		return Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.set.timeout)
	defer cancel()

	var msg *anthropic.Message
	if c.stream {
		stream := c.msgs.NewStreaming(ctx, params, callOpts...)
		acc := anthropic.Message{}
		for stream.Next() {
			if aerr := acc.Accumulate(stream.Current()); aerr != nil && err == nil {
				err = fmt.Errorf("accumulating stream: %w", aerr)
			}
		}
		if serr := stream.Err(); serr != nil {
			err = serr
		}
		_ = stream.Close()
		msg = &acc
	} else {
		msg, err = c.msgs.New(ctx, params, callOpts...)
	}
	if err != nil {
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) && retryableStatus(apiErr.StatusCode) {
			return Response{}, fmt.Errorf("anthropic messages call for model %q at %s failed after %d retries: %w", params.Model, c.base, c.set.maxRetries, err)
		}
		return Response{}, fmt.Errorf("anthropic messages call for model %q at %s: %w", params.Model, c.base, err)
	}
	return fromAnthropic(msg), nil
}

// params builds the request body. Temperature is not a field of this SDK
// version's MessageNewParams, so it travels as a per-call JSON option.
func (c *anthropicConnector) params(req Request) (anthropic.MessageNewParams, []option.RequestOption, error) {
	model := req.Model
	if model == "" {
		model = c.ref.Model
	}
	if model == "" {
		return anthropic.MessageNewParams{}, nil, errors.New("anthropic connector: no model set (set model in the model reference)")
	}
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: int64(firstPositive(req.MaxTokens, c.ref.MaxTokens, DefaultAnthropicMaxTokens)),
	}
	if req.System != "" {
		p.System = append(p.System, anthropic.TextBlockParam{Text: req.System})
	}
	msgs, system, err := toAnthropicMessages(req.Messages)
	if err != nil {
		return p, nil, err
	}
	p.Messages = msgs
	for _, s := range system {
		p.System = append(p.System, anthropic.TextBlockParam{Text: s})
	}
	for _, t := range req.Tools {
		schema, err := schemaObject(t)
		if err != nil {
			return p, nil, err
		}
		in := anthropic.ToolInputSchemaParam{Properties: schema["properties"]}
		if required, ok := schema["required"].([]any); ok {
			for _, r := range required {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		for k, v := range schema {
			switch k {
			case "type", "properties", "required":
			default:
				if in.ExtraFields == nil {
					in.ExtraFields = map[string]any{}
				}
				in.ExtraFields[k] = v
			}
		}
		if in.Properties == nil {
			in.Properties = map[string]any{}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	var opts []option.RequestOption
	if t := firstTemp(req.Temperature, c.ref.Temperature); t != nil {
		opts = append(opts, option.WithJSONSet("temperature", *t))
	}
	return p, opts, nil
}

// toAnthropicMessages maps the conversation to Messages API turns. System
// messages move to the system prompt. Consecutive messages that map to the
// same role merge into one turn, so consecutive tool results become one user
// message of tool_result blocks (which the API requires), and a user note
// right after tool results joins them after the results.
func toAnthropicMessages(in []trajectory.Message) ([]anthropic.MessageParam, []string, error) {
	type turn struct {
		assistant bool
		blocks    []anthropic.ContentBlockParamUnion
	}
	var (
		turns  []turn
		system []string
	)
	add := func(assistant bool, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(turns); n > 0 && turns[n-1].assistant == assistant {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			return
		}
		turns = append(turns, turn{assistant: assistant, blocks: blocks})
	}
	for i, m := range in {
		switch m.Role {
		case trajectory.RoleSystem:
			if m.Content != "" {
				system = append(system, m.Content)
			}
		case trajectory.RoleUser:
			// The API rejects empty text blocks.
			if m.Content != "" {
				add(false, anthropic.NewTextBlock(m.Content))
			}
		case trajectory.RoleTool:
			tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Content != "" {
				tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			add(false, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
		case trajectory.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, toolInput(tc.Arguments), tc.Name))
			}
			add(true, blocks...)
		default:
			return nil, nil, fmt.Errorf("anthropic connector: message %d has unknown role %q (want system, user, assistant or tool)", i, m.Role)
		}
	}
	out := make([]anthropic.MessageParam, 0, len(turns))
	for _, t := range turns {
		if t.assistant {
			out = append(out, anthropic.NewAssistantMessage(t.blocks...))
		} else {
			out = append(out, anthropic.NewUserMessage(t.blocks...))
		}
	}
	return out, system, nil
}

// toolInput is a tool call's arguments as the JSON object tool_use.input
// must be. Arguments that are not an object (a malformed call recorded as a
// JSON string, say) are wrapped as {"arguments": value} rather than dropped.
func toolInput(args json.RawMessage) any {
	t := strings.TrimSpace(string(args))
	if t == "" || t == "null" {
		return json.RawMessage(`{}`)
	}
	if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	if json.Valid([]byte(t)) {
		return map[string]json.RawMessage{"arguments": json.RawMessage(t)}
	}
	return map[string]string{"arguments": t}
}

func fromAnthropic(m *anthropic.Message) Response {
	msg := trajectory.Message{Role: trajectory.RoleAssistant}
	var text []string
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			args := b.Input
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			msg.ToolCalls = append(msg.ToolCalls, trajectory.ToolCall{ID: b.ID, Name: b.Name, Arguments: append(json.RawMessage(nil), args...)})
		}
	}
	msg.Content = strings.Join(text, "")
	// Input tokens include cache writes and reads: all of them were
	// processed (and billed) as input.
	in := m.Usage.InputTokens + m.Usage.CacheCreationInputTokens + m.Usage.CacheReadInputTokens
	return Response{
		Message:    msg,
		Usage:      trajectory.Usage{InputTokens: int(in), OutputTokens: int(m.Usage.OutputTokens)},
		StopReason: string(m.StopReason),
		Model:      string(m.Model),
		ID:         m.ID,
	}
}

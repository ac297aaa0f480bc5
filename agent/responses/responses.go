// Package responses drives an agent served through the OpenAI Responses API
// (target.agent.responses): POST <base_url>/responses with the user's
// message, and later turns continue the same conversation with
// previous_response_id. The agent behind the endpoint (a hosted agent, a
// model with server-side tools) does its own work; this package only
// converses with it.
//
// Output items become trajectory events: message items are assistant
// messages, function_call items tool_call events (recorded, not executed:
// there is no client-side tool to run, so a turn that ends in a function
// call ends with whatever text it has), reasoning items log events with
// their summary, other items (web_search_call, mcp_call, ...) log events
// naming them. Usage is summed into Result.Usage and priced from the
// pricing table when the model is in it.
//
// A response with status failed, an HTTP error after the SDK's retries, or
// an unreadable reply is an infrastructure error; an incomplete response
// (e.g. max_output_tokens) is an answer, recorded with its reason.
package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	oai "github.com/openai/openai-go/v3/responses"

	"evals.si/agent"
	"evals.si/agent/remote"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Agent converses with a Responses API endpoint.
type Agent struct {
	cfg     spec.ResponsesAgent
	svc     oai.ResponseService
	pricing model.Pricing
}

// New checks cfg and returns the agent. The API key is read now from the
// worker variable api_key_env names (through opts.Getenv); without
// api_key_env no Authorization header is sent.
func New(cfg spec.ResponsesAgent, opts model.Options, pricing model.Pricing) (*Agent, error) {
	if err := remote.CheckURL("target.agent.responses.base_url", cfg.BaseURL, "give the API's base, e.g. https://api.openai.com/v1"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("target.agent.responses.model is empty")
	}
	// Explicit options only: openai.NewClient would also read OPENAI_* from
	// the process environment, which must not leak into a run.
	ro := []option.RequestOption{
		option.WithHTTPClient(remote.HTTPClient(opts)),
		option.WithBaseURL(strings.TrimSuffix(cfg.BaseURL, "/") + "/"),
		option.WithMaxRetries(model.DefaultMaxRetries),
	}
	if cfg.APIKeyEnv != "" {
		key := remote.Getenv(opts)(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("target.agent.responses.api_key_env names %s, which is not set: export it where evalsi runs", cfg.APIKeyEnv)
		}
		ro = append(ro, option.WithAPIKey(key))
	}
	return &Agent{cfg: cfg, svc: oai.NewResponseService(ro...), pricing: pricing}, nil
}

// reply is the part of a response this package reads, decoded from the
// raw JSON so that every output item type is seen as sent.
type reply struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Model  string `json:"model"`
	Output []item `json:"output"`
	Usage  *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

type item struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Role    string `json:"role"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// Run sends the opening input, then each reply of Task.User with
// previous_response_id set to the last response.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	c, err := remote.Start("responses agent", &t)
	if err != nil {
		return agent.Result{}, err
	}
	conv0, items := opening(t)
	prev := ""
	return c.Run(ctx, conv0, func(ctx context.Context, conv []trajectory.Message) (remote.Answer, error) {
		// The first request carries the opening messages; later ones the
		// user's reply, continuing the stored conversation.
		params := oai.ResponseNewParams{Model: a.cfg.Model}
		if prev == "" {
			params.Input = firstInput(conv, items)
		} else {
			params.Input = oai.ResponseNewParamsInputUnion{OfString: openai.String(conv[len(conv)-1].Content)}
			params.PreviousResponseID = openai.String(prev)
		}
		start := time.Now()
		resp, err := a.svc.New(ctx, params)
		if err != nil {
			return remote.Answer{}, fmt.Errorf("responses agent: POST %s/responses: %w", strings.TrimSuffix(a.cfg.BaseURL, "/"), err)
		}
		var rep reply
		if err := json.Unmarshal([]byte(resp.RawJSON()), &rep); err != nil || rep.ID == "" {
			return remote.Answer{}, fmt.Errorf("responses agent: unreadable response from %s (%v): %.200s", a.cfg.BaseURL, err, resp.RawJSON())
		}
		c.Steps++
		answer, err := record(c, rep, a.cfg.Model, a.pricing, time.Since(start).Milliseconds())
		if err != nil {
			return remote.Answer{}, err
		}
		prev = rep.ID
		return remote.Answer{Text: answer}, nil
	})
}

// opening is the conversation the first request sends: the record's user,
// assistant and system messages when it has any (sent as input items),
// else the instruction (sent as a string).
func opening(t agent.Task) (conv []trajectory.Message, items bool) {
	for _, m := range t.Input {
		switch m.Role {
		case trajectory.RoleUser, trajectory.RoleAssistant, trajectory.RoleSystem:
			conv = append(conv, trajectory.Message{Role: m.Role, Content: m.Content})
		}
	}
	if len(conv) > 0 {
		return conv, true
	}
	return remote.Instruction(t), false
}

// firstInput is the first request's input: the opening messages as input
// items, or the instruction as a string.
func firstInput(conv []trajectory.Message, items bool) oai.ResponseNewParamsInputUnion {
	if !items {
		return oai.ResponseNewParamsInputUnion{OfString: openai.String(conv[0].Content)}
	}
	var list oai.ResponseInputParam
	for _, m := range conv {
		list = append(list, oai.ResponseInputItemParamOfMessage(m.Content, oai.EasyInputMessageRole(m.Role)))
	}
	return oai.ResponseNewParamsInputUnion{OfInputItemList: list}
}

// record emits one response's model call and output items and returns its
// text answer.
func record(c *remote.Conversation, rep reply, mdl string, pricing model.Pricing, ms int64) (string, error) {
	if rep.Status == "failed" {
		msg := "no error given"
		if rep.Error != nil {
			msg = rep.Error.Code + ": " + rep.Error.Message
		}
		return "", fmt.Errorf("responses agent: response %s failed: %s", rep.ID, msg)
	}
	var u trajectory.Usage
	if rep.Usage != nil {
		u = trajectory.Usage{InputTokens: rep.Usage.InputTokens, OutputTokens: rep.Usage.OutputTokens}
	}
	if rep.Model != "" {
		mdl = rep.Model
	}
	usd, _ := pricing.Cost(mdl, u)
	c.Usage = c.Usage.Add(u)
	c.CostUSD += usd
	stop := rep.Status
	if rep.IncompleteDetails != nil && rep.IncompleteDetails.Reason != "" {
		stop += ": " + rep.IncompleteDetails.Reason
		c.Note(fmt.Sprintf("response %s incomplete (%s)", rep.ID, rep.IncompleteDetails.Reason))
	}
	if err := c.Emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: c.Steps, DurationMS: ms,
		ModelCall: &trajectory.ModelCall{Model: mdl, Usage: u, CostUSD: usd, StopReason: stop,
			Provider: "openai", ResponseModel: rep.Model, ResponseID: rep.ID}}); err != nil {
		return "", err
	}
	var texts []string
	var calls []trajectory.ToolCall
	for _, it := range rep.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				switch {
				case c.Text != "":
					texts = append(texts, c.Text)
				case c.Refusal != "":
					texts = append(texts, c.Refusal)
				}
			}
		case "function_call":
			args := it.Arguments
			var s string
			if json.Unmarshal(args, &s) == nil && json.Valid([]byte(s)) {
				args = json.RawMessage(s)
			}
			calls = append(calls, trajectory.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args})
		case "reasoning":
			var sum []string
			for _, s := range it.Summary {
				sum = append(sum, s.Text)
			}
			if err := c.Emit(trajectory.Event{Kind: trajectory.KindLog, Step: c.Steps, Log: &trajectory.Log{Text: "reasoning: " + strings.Join(sum, "\n")}}); err != nil {
				return "", err
			}
		default:
			if err := c.Emit(trajectory.Event{Kind: trajectory.KindLog, Step: c.Steps, Log: &trajectory.Log{Text: "output item: " + it.Type + " " + it.Name}}); err != nil {
				return "", err
			}
		}
	}
	answer := strings.Join(texts, "\n")
	msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer, ToolCalls: calls}
	if err := c.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: c.Steps, Message: &msg}); err != nil {
		return "", err
	}
	for i := range calls {
		if err := c.Emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: c.Steps, ToolCall: &calls[i]}); err != nil {
			return "", err
		}
	}
	return answer, nil
}

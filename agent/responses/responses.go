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
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	oai "github.com/openai/openai-go/v3/responses"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Agent converses with a Responses API endpoint.
type Agent struct {
	cfg     spec.ResponsesAgent
	svc     oai.ResponseService
	pricing model.Pricing
	log     *slog.Logger
}

// New checks cfg and returns the agent. The API key is read now from the
// worker variable api_key_env names (through opts.Getenv); without
// api_key_env no Authorization header is sent.
func New(cfg spec.ResponsesAgent, opts model.Options, pricing model.Pricing) (*Agent, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target.agent.responses.base_url %q is not an http(s) URL: give the API's base, e.g. https://api.openai.com/v1", cfg.BaseURL)
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("target.agent.responses.model is empty")
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Explicit options only: openai.NewClient would also read OPENAI_* from
	// the process environment, which must not leak into a run.
	ro := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithBaseURL(strings.TrimSuffix(cfg.BaseURL, "/") + "/"),
		option.WithMaxRetries(model.DefaultMaxRetries),
	}
	if cfg.APIKeyEnv != "" {
		key := getenv(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("target.agent.responses.api_key_env names %s, which is not set: export it where evalsi runs", cfg.APIKeyEnv)
		}
		ro = append(ro, option.WithAPIKey(key))
	}
	return &Agent{cfg: cfg, svc: oai.NewResponseService(ro...), pricing: pricing, log: log}, nil
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
	if t.Emit == nil {
		return agent.Result{}, errors.New("responses agent: task has no event sink")
	}
	r := &run{task: &t}
	input, conv := opening(t)
	if len(conv) == 0 {
		return r.fail(ctx, fmt.Errorf("responses agent: record %q has no instruction", t.RecordID))
	}
	for i := range conv {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Message: &conv[i]}); err != nil {
			return r.fail(ctx, err)
		}
	}
	prev := ""
	for {
		params := oai.ResponseNewParams{Model: a.cfg.Model, Input: input}
		if prev != "" {
			params.PreviousResponseID = openai.String(prev)
		}
		start := time.Now()
		resp, err := a.svc.New(ctx, params)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("responses agent: POST %s/responses: %w", strings.TrimSuffix(a.cfg.BaseURL, "/"), err))
		}
		var rep reply
		if err := json.Unmarshal([]byte(resp.RawJSON()), &rep); err != nil || rep.ID == "" {
			return r.fail(ctx, fmt.Errorf("responses agent: unreadable response from %s (%v): %.200s", a.cfg.BaseURL, err, resp.RawJSON()))
		}
		r.steps++
		answer, err := r.record(rep, a.cfg.Model, a.pricing, time.Since(start).Milliseconds())
		if err != nil {
			return r.fail(ctx, err)
		}
		r.out = answer
		prev = rep.ID
		conv = append(conv, trajectory.Message{Role: trajectory.RoleAssistant, Content: answer})
		if t.User == nil {
			break
		}
		next, done, err := t.User.Reply(ctx, conv)
		if err != nil {
			return r.fail(ctx, fmt.Errorf("responses agent: user simulator: %w", err))
		}
		if done {
			if err := r.userDone(next, conv); err != nil {
				return r.fail(ctx, err)
			}
			break
		}
		msg := trajectory.Message{Role: trajectory.RoleUser, Content: next}
		conv = append(conv, msg)
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &msg}); err != nil {
			return r.fail(ctx, err)
		}
		input = oai.ResponseNewParamsInputUnion{OfString: openai.String(next)}
	}
	return r.stop()
}

// opening is the first request's input: the record's messages as input
// items when it has them, else the instruction as a string.
func opening(t agent.Task) (oai.ResponseNewParamsInputUnion, []trajectory.Message) {
	var items oai.ResponseInputParam
	var conv []trajectory.Message
	for _, m := range t.Input {
		role := oai.EasyInputMessageRole(m.Role)
		switch m.Role {
		case trajectory.RoleUser, trajectory.RoleAssistant, trajectory.RoleSystem:
		default:
			continue
		}
		items = append(items, oai.ResponseInputItemParamOfMessage(m.Content, role))
		conv = append(conv, trajectory.Message{Role: m.Role, Content: m.Content})
	}
	if len(items) > 0 {
		return oai.ResponseNewParamsInputUnion{OfInputItemList: items}, conv
	}
	if strings.TrimSpace(t.Instruction) == "" {
		return oai.ResponseNewParamsInputUnion{}, nil
	}
	return oai.ResponseNewParamsInputUnion{OfString: openai.String(t.Instruction)},
		[]trajectory.Message{{Role: trajectory.RoleUser, Content: t.Instruction}}
}

// run is the state of one Run.
type run struct {
	task  *agent.Task
	steps int
	out   string
	usage trajectory.Usage
	cost  float64
	notes []string
}

// record emits one response's model call and output items and returns its
// text answer.
func (r *run) record(rep reply, mdl string, pricing model.Pricing, ms int64) (string, error) {
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
	r.usage = r.usage.Add(u)
	r.cost += usd
	stop := rep.Status
	if rep.IncompleteDetails != nil && rep.IncompleteDetails.Reason != "" {
		stop += ": " + rep.IncompleteDetails.Reason
		r.notes = append(r.notes, fmt.Sprintf("response %s incomplete (%s)", rep.ID, rep.IncompleteDetails.Reason))
	}
	if err := r.emit(trajectory.Event{Kind: trajectory.KindModelCall, Step: r.steps, DurationMS: ms,
		ModelCall: &trajectory.ModelCall{Model: mdl, Usage: u, CostUSD: usd, StopReason: stop}}); err != nil {
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
			if err := r.emit(trajectory.Event{Kind: trajectory.KindLog, Step: r.steps, Log: &trajectory.Log{Text: "reasoning: " + strings.Join(sum, "\n")}}); err != nil {
				return "", err
			}
		default:
			if err := r.emit(trajectory.Event{Kind: trajectory.KindLog, Step: r.steps, Log: &trajectory.Log{Text: "output item: " + it.Type + " " + it.Name}}); err != nil {
				return "", err
			}
		}
	}
	answer := strings.Join(texts, "\n")
	msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: answer, ToolCalls: calls}
	if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &msg}); err != nil {
		return "", err
	}
	for i := range calls {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindToolCall, Step: r.steps, ToolCall: &calls[i]}); err != nil {
			return "", err
		}
	}
	return answer, nil
}

// userDone records the end of a conversation the user ended: a closing
// remark (text before the simulator's stop signal) is recorded, not
// answered.
func (r *run) userDone(text string, conv []trajectory.Message) error {
	turns := 0
	for _, m := range conv {
		if m.Role == trajectory.RoleUser {
			turns++
		}
	}
	r.notes = append(r.notes, fmt.Sprintf("the user is done after %d user turns", turns))
	if text == "" {
		return nil
	}
	return r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, Message: &trajectory.Message{Role: trajectory.RoleUser, Content: text}})
}

func (r *run) emit(e trajectory.Event) error {
	e.Time = time.Now()
	if err := r.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

func (r *run) result(reason string) agent.Result {
	return agent.Result{Output: r.out, Usage: r.usage, CostUSD: r.cost, Steps: r.steps, StopReason: reason}
}

func (r *run) stop() (agent.Result, error) {
	return r.result(agent.StopAnswered), r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps,
		Stop: &trajectory.Stop{Reason: agent.StopAnswered, Detail: strings.Join(r.notes, "; ")}})
}

// fail records an infrastructure error (best effort) and returns it; a
// done context is a cancellation.
func (r *run) fail(ctx context.Context, err error) (agent.Result, error) {
	reason := agent.StopError
	if ctx.Err() != nil {
		reason = agent.StopCanceled
	}
	if reason == agent.StopError {
		_ = r.emit(trajectory.Event{Kind: trajectory.KindError, Step: r.steps, Error: &trajectory.Error{Kind: "agent", Message: err.Error()}})
	}
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: reason, Detail: err.Error()}})
	return r.result(reason), err
}

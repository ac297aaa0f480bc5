// Package a2a drives an agent over the Agent2Agent protocol
// (target.agent.a2a), with the official Go SDK (a2a-go v2): it sends the
// task as a message and follows the task the agent answers with until it
// settles.
//
// # Versions
//
// A2A v1.0 (SendMessage, GetTask, ...) and v0.3 (message/send, tasks/get,
// ...) are both spoken. The version comes from the agent card: url is the
// agent's base URL and the card is read from <url>/.well-known/agent-card.json
// (then from the origin's /.well-known/agent-card.json when url has a path),
// asking for the v1.0 card (A2A-Version: 1.0) so that an agent serving both
// lists both; a v0.3 card is read too. Of the card's interfaces the newest
// protocol version wins, JSON-RPC before HTTP+JSON. Fallback, when no card
// is served (404): url is taken as the JSON-RPC endpoint and v1.0 is tried;
// if the agent answers "method not found" or "version not supported", v0.3
// is used instead.
//
// # Following a task
//
// Sending is blocking (the SDK's default): the agent answers with a
// message, or with a task in a terminal state (completed, failed, canceled,
// rejected) or an interrupted one (input-required, auth-required). A task
// still submitted or working is polled with GetTask until it leaves those
// states. When the run is canceled, the task is canceled too (best effort).
//
// With a user simulator (Task.User), the conversation goes on in the same
// contextId: after a completed task or a message, the user's reply starts a
// new task; after input-required, the reply answers that task (same
// taskId). Without one, an input-required task ends the run with that state
// recorded. A task that ends failed, canceled, rejected or auth-required is
// the agent's answer, not an infrastructure error: its state is recorded in
// the stop event and a log event, and the conversation ends there.
// Connection failures, HTTP or JSON-RPC errors and malformed replies are
// infrastructure errors.
//
// # Trajectory and answer
//
// Every user message is a message event; the agent's messages (task
// history, status messages) are assistant message events, each artifact an
// assistant message event, and each state the task is seen in a log event.
// The answer is the text of the task's artifacts when it completed with
// any, else its status message, else its last agent message; a direct
// message reply is its own text. Each message sent is one step.
//
// headers_env maps header names to worker variables; the values are sent
// with every request (agent card included) and never logged.
package a2a

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"evals.si/agent"
	"evals.si/agent/remote"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// Protocol versions this package speaks.
const (
	V1 = "1.0"
	V0 = "0.3"
)

// Poll intervals for a task that is still working.
const (
	firstPoll = 100 * time.Millisecond
	maxPoll   = 2 * time.Second
)

// Agent talks to one A2A agent.
type Agent struct {
	url string
	hc  *http.Client
	log *slog.Logger
}

// New checks cfg and returns the agent. headers_env values are read now
// through opts.Getenv.
func New(cfg spec.A2AAgent, opts model.Options) (*Agent, error) {
	if err := remote.CheckURL("target.agent.a2a.url", cfg.URL, "give the agent's base URL (where /.well-known/agent-card.json is served)"); err != nil {
		return nil, err
	}
	h, err := remote.Headers("target.agent.a2a.headers_env", cfg.HeadersEnv, opts.Getenv)
	if err != nil {
		return nil, err
	}
	// A copy: the headers go into its transport.
	c := *remote.HTTPClient(opts)
	hc := &c
	if len(h) > 0 {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = headerTransport{base: base, h: h}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{url: strings.TrimSuffix(cfg.URL, "/"), hc: hc, log: log}, nil
}

// headerTransport adds the headers_env headers to every request.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// conn is a client for one run and the protocol version it speaks.
type conn struct {
	c       *a2aclient.Client
	version string
}

// connect resolves the card and builds a client from it, or falls back to
// url as a v1.0 (fallback v0.3) JSON-RPC endpoint when no card is served.
func (a *Agent) connect(ctx context.Context, version string) (*conn, bool, error) {
	chosen := ""
	opts := a.factoryOptions(&chosen)
	if version == "" {
		card, err := a.card(ctx)
		if err != nil {
			return nil, false, err
		}
		if card != nil {
			c, err := a2aclient.NewFromCard(ctx, card, opts...)
			if err != nil {
				return nil, false, fmt.Errorf("a2a agent %s: no interface of its agent card can be used: %w", a.url, err)
			}
			return &conn{c: c, version: chosen}, false, nil
		}
		version = V1
	}
	c, err := a2aclient.NewFromEndpoints(ctx, []*sdk.AgentInterface{{URL: a.url, ProtocolBinding: sdk.TransportProtocolJSONRPC, ProtocolVersion: sdk.ProtocolVersion(version)}}, opts...)
	if err != nil {
		return nil, false, fmt.Errorf("a2a agent %s: %w", a.url, err)
	}
	return &conn{c: c, version: chosen}, true, nil
}

// factoryOptions registers the v1.0 and v0.3 JSON-RPC and HTTP+JSON
// transports on the agent's HTTP client; *chosen receives the version of
// the transport the factory picks.
func (a *Agent) factoryOptions(chosen *string) []a2aclient.FactoryOption {
	wrap := func(version string, f a2aclient.TransportFactory) a2aclient.TransportFactory {
		return a2aclient.TransportFactoryFn(func(ctx context.Context, card *sdk.AgentCard, iface *sdk.AgentInterface) (a2aclient.Transport, error) {
			t, err := f.Create(ctx, card, iface)
			if err == nil {
				*chosen = version
			}
			return t, err
		})
	}
	return []a2aclient.FactoryOption{
		a2aclient.WithDefaultsDisabled(),
		a2aclient.WithTransport(sdk.TransportProtocolJSONRPC, wrap(V1, a2aclient.TransportFactoryFn(func(ctx context.Context, _ *sdk.AgentCard, iface *sdk.AgentInterface) (a2aclient.Transport, error) {
			return a2aclient.NewJSONRPCTransport(iface.URL, a.hc), nil
		}))),
		a2aclient.WithTransport(sdk.TransportProtocolHTTPJSON, wrap(V1, a2aclient.TransportFactoryFn(func(ctx context.Context, _ *sdk.AgentCard, iface *sdk.AgentInterface) (a2aclient.Transport, error) {
			u, err := url.Parse(iface.URL)
			if err != nil {
				return nil, err
			}
			return a2aclient.NewRESTTransport(u, a.hc), nil
		}))),
		a2aclient.WithCompatTransport(a2av0.Version, sdk.TransportProtocolJSONRPC, wrap(V0, a2av0.NewJSONRPCTransportFactory(a2av0.JSONRPCTransportConfig{Client: a.hc}))),
		a2aclient.WithCompatTransport(a2av0.Version, sdk.TransportProtocolHTTPJSON, wrap(V0, a2av0.NewRESTTransportFactory(a2av0.RESTTransportConfig{Client: a.hc}))),
	}
}

// card reads the agent card; nil (no error) when none is served.
func (a *Agent) card(ctx context.Context) (*sdk.AgentCard, error) {
	r := &agentcard.Resolver{Client: a.hc, CardParser: a2av0.NewAgentCardParser()}
	bases := []string{a.url}
	if u, err := url.Parse(a.url); err == nil && strings.Trim(u.Path, "/") != "" {
		bases = append(bases, u.Scheme+"://"+u.Host)
	}
	for _, b := range bases {
		card, err := r.Resolve(ctx, b, agentcard.WithRequestHeader("A2A-Version", V1))
		var st *agentcard.ErrStatusNotOK
		switch {
		case err == nil:
			return card, nil
		case errors.As(err, &st) && st.StatusCode == http.StatusNotFound:
			continue
		default:
			return nil, fmt.Errorf("a2a agent %s: reading its agent card: %w", a.url, err)
		}
	}
	return nil, nil
}

// Run sends the instruction and follows the conversation; see the package
// comment.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	c, err := remote.Start("a2a agent", &t)
	if err != nil {
		return agent.Result{}, err
	}
	c.StepPerTurn = true
	r := &run{Conversation: c, seen: map[string]bool{}}
	opening := remote.Instruction(t)
	if err := c.CheckOpening(opening); err != nil {
		return c.Fail(ctx, err)
	}
	cn, fallback, err := a.connect(ctx, "")
	if err != nil {
		return c.Fail(ctx, err)
	}
	defer func() { _ = cn.c.Destroy() }()
	if err := c.Log(fmt.Sprintf("a2a: %s speaking A2A v%s", a.url, cn.version)); err != nil {
		return c.Fail(ctx, err)
	}
	var contextID string
	var taskID sdk.TaskID
	err = c.Converse(ctx, opening, func(ctx context.Context, conv []trajectory.Message) (remote.Answer, error) {
		out := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart(conv[len(conv)-1].Content))
		out.ContextID, out.TaskID = contextID, taskID
		r.seen[out.ID] = true
		start := time.Now()
		res, err := cn.c.SendMessage(ctx, &sdk.SendMessageRequest{Message: out})
		if err != nil && fallback && c.Steps == 1 && (errors.Is(err, sdk.ErrMethodNotFound) || errors.Is(err, sdk.ErrVersionNotSupported)) {
			_ = cn.c.Destroy()
			if cn, _, err = a.connect(ctx, V0); err != nil {
				return remote.Answer{}, err
			}
			if err := c.Log(fmt.Sprintf("a2a: %s has no agent card and refused v1.0; speaking A2A v%s", a.url, V0)); err != nil {
				return remote.Answer{}, err
			}
			res, err = cn.c.SendMessage(ctx, &sdk.SendMessageRequest{Message: out})
		}
		if err != nil {
			return remote.Answer{}, fmt.Errorf("a2a agent %s: sending a message: %w", a.url, err)
		}
		taskID = ""
		switch v := res.(type) {
		case *sdk.Message:
			// A message reply need not name its context: the conversation
			// stays in the one it had.
			if v.ContextID != "" {
				contextID = v.ContextID
			}
			return remote.Answer{Text: partsText(v.Parts)}, r.agentMessage(v, time.Since(start))
		case *sdk.Task:
			task, err := a.follow(ctx, cn.c, r, v)
			if err != nil {
				return remote.Answer{}, err
			}
			contextID = task.ContextID
			answer, err := r.taskAnswer(task)
			if err != nil {
				return remote.Answer{}, err
			}
			switch state := task.Status.State; state {
			case sdk.TaskStateCompleted:
				return remote.Answer{Text: answer}, nil
			case sdk.TaskStateInputRequired:
				// The user's reply answers this task.
				taskID = task.ID
				return remote.Answer{Text: answer, Waiting: "task ended input-required"}, nil
			default:
				return remote.Answer{Text: answer, End: "task ended " + stateName(state)}, nil
			}
		default:
			return remote.Answer{}, fmt.Errorf("a2a agent %s: unexpected reply %T", a.url, res)
		}
	})
	if err != nil {
		return c.Fail(ctx, err)
	}
	if d := c.Detail(); d != "" {
		if err := c.Log("a2a: " + d); err != nil {
			return c.Fail(ctx, err)
		}
	}
	return c.Stop()
}

// follow polls a task until it is terminal or interrupted, recording the
// states it is seen in. When ctx ends first, the task is canceled.
func (a *Agent) follow(ctx context.Context, c *a2aclient.Client, r *run, task *sdk.Task) (*sdk.Task, error) {
	wait := firstPoll
	last := sdk.TaskState("")
	for {
		if task.Status.State != last {
			last = task.Status.State
			if err := r.Log(fmt.Sprintf("a2a task %s: %s", task.ID, stateName(last))); err != nil {
				return nil, err
			}
		}
		if settled(task.Status.State) {
			return task, nil
		}
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, cerr := c.CancelTask(cctx, &sdk.CancelTaskRequest{ID: task.ID})
			cancel()
			if cerr != nil {
				a.log.Warn("a2a: canceling the task after the run was canceled failed", "task", task.ID, "err", cerr)
			}
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, maxPoll)
		next, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: task.ID})
		if err != nil {
			return nil, fmt.Errorf("a2a agent %s: polling task %s: %w", a.url, task.ID, err)
		}
		task = next
	}
}

// settled reports whether a task has stopped moving without us: terminal,
// or waiting for input or authentication.
func settled(s sdk.TaskState) bool {
	return s.Terminal() || s == sdk.TaskStateInputRequired || s == sdk.TaskStateAuthRequired
}

// stateName is a task state as A2A v0.3 spells it (completed,
// input-required), the spelling of the docs, whichever version was spoken.
func stateName(s sdk.TaskState) string {
	n := strings.ToLower(strings.TrimPrefix(string(s), "TASK_STATE_"))
	if n == "" {
		return "unspecified"
	}
	return strings.ReplaceAll(n, "_", "-")
}

// partsText joins the text parts of a message or artifact.
func partsText(parts sdk.ContentParts) string {
	var out []string
	for _, p := range parts {
		if p == nil {
			continue
		}
		if t := p.Text(); t != "" {
			out = append(out, t)
		}
	}
	return strings.Join(out, "\n")
}

// run is the state of one Run.
type run struct {
	*remote.Conversation
	// seen holds the ids of messages already recorded.
	seen map[string]bool
}

// agentMessage records an agent message once.
func (r *run) agentMessage(m *sdk.Message, d time.Duration) error {
	if m == nil || (m.ID != "" && r.seen[m.ID]) || m.Role == sdk.MessageRoleUser {
		return nil
	}
	if m.ID != "" {
		r.seen[m.ID] = true
	}
	msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: partsText(m.Parts)}
	return r.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.Steps, DurationMS: d.Milliseconds(), Message: &msg})
}

// taskAnswer records a settled task's agent messages and artifacts and
// returns its answer (see the package comment).
func (r *run) taskAnswer(task *sdk.Task) (string, error) {
	lastAgent := ""
	for _, m := range task.History {
		if m != nil && m.Role == sdk.MessageRoleAgent {
			lastAgent = partsText(m.Parts)
		}
		if err := r.agentMessage(m, 0); err != nil {
			return "", err
		}
	}
	status := ""
	if m := task.Status.Message; m != nil {
		status = partsText(m.Parts)
		if err := r.agentMessage(m, 0); err != nil {
			return "", err
		}
	}
	var arts []string
	for _, art := range task.Artifacts {
		if art == nil {
			continue
		}
		txt := partsText(art.Parts)
		if txt == "" {
			continue
		}
		key := "artifact:" + string(art.ID) + ":" + txt
		if !r.seen[key] {
			r.seen[key] = true
			msg := trajectory.Message{Role: trajectory.RoleAssistant, Content: txt, Name: art.Name}
			if err := r.Emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.Steps, Message: &msg}); err != nil {
				return "", err
			}
		}
		arts = append(arts, txt)
	}
	if task.Status.State == sdk.TaskStateCompleted && len(arts) > 0 {
		return strings.Join(arts, "\n"), nil
	}
	for _, s := range []string{status, lastAgent, strings.Join(arts, "\n")} {
		if s != "" {
			return s, nil
		}
	}
	return "", nil
}

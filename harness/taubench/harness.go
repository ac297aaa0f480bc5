// Package taubench is the τ-bench (tau2) harness, TauBenchHarness: the
// built-in agent loop with a tau2 domain around it. The agent gets tau2's
// agent instruction, the domain's policy and its tools against a live
// environment; the user is simulated through the run's judge with tau2's
// user prompt and guidelines, and for dual control (telecom) has tools of
// their own on the same environment. The conversation runs as tau2's
// half-duplex orchestrator runs it, and is graded by tau2's
// evaluate_simulation (package tau2).
package taubench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"evals.si/agent"
	"evals.si/harness/taubench/domain"
	"evals.si/harness/taubench/tau2"
	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// tau2's run defaults (tau2/config.py).
const (
	DefaultMaxSteps  = 200
	DefaultMaxErrors = 10
)

// Pricer prices a model's usage; model.Pricing implements it.
type Pricer interface {
	Cost(model string, u trajectory.Usage) (usd float64, ok bool)
}

// Options configure the harness.
type Options struct {
	// Agent and AgentModel are the run's target model; nil for the oracle.
	Agent      model.Connector
	AgentModel string
	// User and UserModel are the judge that plays the user; nil for the
	// oracle.
	User      model.Connector
	UserModel string
	// Oracle replays each task's gold actions instead of calling models.
	Oracle bool
	// MaxSteps and MaxErrors end a conversation as tau2 does (0: tau2's
	// defaults, 200 and 10).
	MaxSteps, MaxErrors int
	Pricing             Pricer
	Logger              *slog.Logger
}

// Harness runs tau2 tasks. It is safe for concurrent Runs.
type Harness struct {
	o    Options
	data dataCache
}

var _ agent.Agent = (*Harness)(nil)

// New returns the harness.
func New(o Options) (*Harness, error) {
	if !o.Oracle && (o.Agent == nil || o.User == nil) {
		return nil, errors.New("taubench: the agent's model and the user's judge are both needed (or the oracle)")
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.MaxErrors <= 0 {
		o.MaxErrors = DefaultMaxErrors
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Harness{o: o}, nil
}

// Verdict details: tau2's reward info, and the checks that failed.
type verdictDetails struct {
	Domain      string       `json:"domain"`
	TaskID      string       `json:"task_id"`
	Termination string       `json:"termination_reason"`
	Failed      []string     `json:"failed,omitempty"`
	RewardInfo  *tau2.Reward `json:"reward_info"`
}

// Run implements agent.Agent: one simulation of the record's task, and
// its grade as the verdict. Errors are infrastructure failures (a model
// call failed, the data could not be read, the grading replay diverged);
// how the agent did is the verdict.
func (h *Harness) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	md, err := taskMetadata(t.Metadata)
	if err != nil {
		return agent.Result{}, err
	}
	d, err := h.data.get(md.Domain, md.Dir)
	if err != nil {
		return agent.Result{}, err
	}
	if why := md.Task.NeedsJudge(); why != "" {
		return agent.Result{}, fmt.Errorf("task %s cannot be graded: %s", md.Task.ID, why)
	}
	c := &conversation{h: h, t: t, md: md, data: d}
	var res agent.Result
	if h.o.Oracle {
		err = c.oracle(ctx)
	} else {
		err = c.run(ctx)
	}
	res = c.result()
	if err != nil {
		return res, err
	}
	reward, err := tau2.Evaluate(d, &md.Task, c.termination, c.messages)
	if err != nil {
		return res, err
	}
	details, err := json.Marshal(verdictDetails{Domain: md.Domain, TaskID: md.Task.ID, Termination: c.termination,
		Failed: reward.Failed(), RewardInfo: reward})
	if err != nil {
		return res, fmt.Errorf("taubench: writing the verdict: %w", err)
	}
	// tau2's is_successful: a reward of 1 within 1e-6.
	pass := math.Abs(reward.Reward-1) <= 1e-6
	res.Verdict = &trajectory.Checker{Pass: pass, Score: reward.Reward, Details: string(details)}
	if !pass {
		_ = c.emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf("taubench: reward %g: %v", reward.Reward, reward.Failed())}})
	}
	return res, nil
}

func taskMetadata(md map[string]spec.JSON) (*Metadata, error) {
	raw := make(map[string]json.RawMessage, len(md))
	for k, v := range md {
		raw[k] = json.RawMessage(v)
	}
	m, err := ParseMetadata(raw)
	if err != nil {
		return nil, fmt.Errorf("taubench: %w", err)
	}
	return m, nil
}

// newWorld returns the trial's live environment, in the task's initial
// state.
func newWorld(d domain.Data, task *tau2.Task) (*tau2.World, error) {
	w, err := tau2.NewWorld(d)
	if err != nil {
		return nil, err
	}
	if task.InitialState != nil && len(task.InitialState.MessageHistory) > 0 {
		return nil, fmt.Errorf("task %s starts from a message history, which this harness does not continue", task.ID)
	}
	if err := w.SetState(task.InitialState, nil); err != nil {
		return nil, fmt.Errorf("task %s: setting the initial state: %w", task.ID, err)
	}
	return w, nil
}

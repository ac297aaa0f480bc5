package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"evals.si/agent"
	"evals.si/checker"
	"evals.si/dataset"
	"evals.si/egress"
	"evals.si/environment"
	"evals.si/evaluate"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// AgentRunner runs an agent trial: environment → sandbox → agent → diff →
// checker → evaluators.
type AgentRunner struct {
	Spec       *spec.Spec
	Envs       *environment.Manager
	Agent      agent.Agent
	Checkers   *checker.Registry
	Evaluators []evaluate.Evaluator
	Logger     *slog.Logger
	// ProxyDir holds egress proxies' unix sockets.
	ProxyDir string
	// User, when set, is the task's user (user_simulator). One that can
	// bind to a trial (ForTask) is bound, so its model calls are recorded.
	User agent.User
}

// taskUser is a User that binds to one trial's record, trial and sink.
type taskUser interface {
	ForTask(recordID string, trial int, emit trajectory.Sink) agent.User
}

// RunTrial runs one agent trial.
func (r *AgentRunner) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	env, err := dataset.Environment(r.Spec.Environment, tc.Record)
	if err != nil {
		return nil, &NonRetryable{Err: err}
	}
	if env == nil {
		env = &spec.Environment{}
	}
	// A CLI agent's install joins the setup (and its snapshot identity),
	// its allow_hosts the network allowlist.
	if s, ok := r.Agent.(agent.EnvironmentShaper); ok {
		env = s.ShapeEnvironment(env)
	}
	m := meterFrom(ctx)
	outputLimit := r.Spec.Caps.CommandOutputBytes()
	// Setup commands run inside Prepare, and in NewSandbox when the rung
	// cannot snapshot.
	setup := environment.SetupOptions{OutputLimit: outputLimit}
	prepStart := time.Now()
	prep, err := r.Envs.Prepare(ctx, env, setup)
	m.lifecycleSince(prepStart)
	if err != nil {
		return nil, envErr(err)
	}
	pol := prep.Policy()
	var proxy *egress.Proxy
	if pol.Network == sandbox.NetworkAllowlist {
		proxy, err = r.startProxy(ctx, tc, pol)
		if err != nil {
			return nil, &kindError{kind: "sandbox", err: err}
		}
		defer proxy.Close()
		pol.ProxyAddr = proxy.UnixAddr()
	}
	createStart := time.Now()
	raw, err := prep.NewSandbox(ctx, pol, setup)
	m.lifecycleSince(createStart)
	if err != nil {
		return nil, envErr(err)
	}
	// The agent, the diff and the checker use the timed sandbox, whose
	// commands get the run's output cap; policy changes (escalation) go to
	// the sandbox itself.
	sb := timedSandbox{Sandbox: cappedSandbox{Sandbox: raw, outputLimit: outputLimit}, m: m}
	defer sb.Close(context.WithoutCancel(ctx))
	report := sb.Report()
	iso, _ := json.Marshal(report)
	_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf("sandbox: rung %s (%s), network %s", report.Rung, report.Isolation, report.Network)}})

	task := agent.Task{
		RecordID:       tc.Record.ID,
		Trial:          tc.Trial,
		Instruction:    tc.Record.Input.Prompt(),
		Sandbox:        sb,
		Workdir:        prep.Workdir,
		CommandTimeout: env.CommandTimeout.D(),
		OutputLimit:    outputLimit,
		Emit:           tc.Emit,
		Escalate:       r.escalate(raw, pol),
	}
	if tc.Record.Input.Messages != nil {
		task.Input = inputMessages(tc.Record.Input)
	}
	if task.User = r.User; task.User != nil {
		if b, ok := r.User.(taskUser); ok {
			task.User = b.ForTask(task.RecordID, task.Trial, task.Emit)
		}
	}
	res, err := r.Agent.Run(ctx, task)
	if err != nil {
		return nil, &kindError{kind: "agent", err: fmt.Errorf("agent: %w", err)}
	}
	o := &Outcome{Output: res.Output, Usage: res.Usage, CostUSD: res.CostUSD, Isolation: iso}

	diff, isGit, err := checker.CaptureDiff(ctx, sb, prep.Workdir)
	if err != nil {
		return nil, &kindError{kind: "sandbox", err: fmt.Errorf("capturing diff: %w", err)}
	}
	o.Diff = diff
	if isGit {
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: fmt.Sprintf("diff captured: %d bytes", len(diff))}})
	}
	if env.Checker != nil && len(env.Checker.Command) > 0 {
		start := time.Now()
		v, err := checker.Run(ctx, sb, *env.Checker, prep.Workdir, r.Checkers)
		if err != nil {
			return nil, &kindError{kind: "checker", err: fmt.Errorf("checker: %w", err)}
		}
		o.Verdict = &trajectory.Checker{Command: env.Checker.Command, ExitCode: v.ExitCode, Output: v.Output, Pass: v.Pass, Score: v.Score, Details: v.Details}
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindChecker, DurationMS: time.Since(start).Milliseconds(), Checker: o.Verdict})
	} else if res.Verdict != nil {
		// The agent's own verdict (an external harness's Check) counts only
		// when the spec has no checker: the spec's checker wins.
		o.Verdict = res.Verdict
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindChecker, Checker: o.Verdict})
	}
	var budget *spec.Budget
	if h := r.Spec.Harness; h != nil && h.Builtin != nil {
		budget = h.Builtin.Budget
	}
	events, err := r.collect(tc)
	if err != nil {
		return nil, err
	}
	o.Evaluations = runEvaluators(ctx, tc.Emit, r.Evaluators, evaluate.Trial{
		Record: tc.Record, Output: res.Output, Events: events, Diff: diff, HasDiff: isGit,
		Verdict: o.Verdict, Usage: res.Usage, CostUSD: res.CostUSD, Steps: res.Steps,
		StopReason: res.StopReason, Budget: budget, Agent: true,
	})
	return o, nil
}

// collect returns the trial's events so far; the engine's sink keeps them
// in the store, and evaluators read them back from there.
func (r *AgentRunner) collect(tc *TrialContext) ([]trajectory.Event, error) {
	if tc.Events == nil {
		return nil, nil
	}
	return tc.Events(), nil
}

func (r *AgentRunner) startProxy(ctx context.Context, tc *TrialContext, pol sandbox.Policy) (*egress.Proxy, error) {
	p := egress.New(egress.Policy{AllowHosts: pol.AllowHosts, SocketDir: r.ProxyDir}, r.Logger, func(ev egress.Event) {
		if ev.Allowed {
			return
		}
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindPolicy, Policy: &trajectory.Policy{
			Kind: "network", Host: fmt.Sprintf("%s:%d", ev.Host, ev.Port), Detail: "refused by egress proxy: " + ev.Reason,
		}})
	})
	if err := p.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting egress proxy: %w", err)
	}
	return p, nil
}

// cappedSandbox gives each command that sets no output limit of its own the
// run's caps.command_output_kb, so the checker, agents other than the
// built-in one and an external harness's commands honour it too. Commands
// that set one keep it (the diff capture's, a CLI agent's larger one).
type cappedSandbox struct {
	sandbox.Sandbox
	outputLimit int
}

func (s cappedSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.OutputLimit <= 0 {
		req.OutputLimit = s.outputLimit
	}
	return s.Sandbox.Exec(ctx, req)
}

// policySetter is implemented by sandboxes whose policy can widen mid-trial.
type policySetter interface {
	SetPolicy(sandbox.Policy) error
}

// escalate decides request_escalation: granted only for kinds listed in
// harness.builtin.escalation.allow; a granted network escalation widens the
// sandbox's network for the rest of the trial.
func (r *AgentRunner) escalate(sb sandbox.Sandbox, pol sandbox.Policy) func(ctx context.Context, kind, reason string) (bool, error) {
	var allow []string
	if h := r.Spec.Harness; h != nil && h.Builtin != nil && h.Builtin.Escalation != nil {
		allow = h.Builtin.Escalation.Allow
	}
	return func(ctx context.Context, kind, reason string) (bool, error) {
		if !slices.Contains(allow, kind) {
			return false, nil
		}
		if kind == "network" {
			// A rung that cannot widen its policy mid-trial denies the
			// request (recorded as such) rather than failing the trial.
			ps, ok := sb.(policySetter)
			if !ok {
				r.logger().Warn("network escalation allowed by the spec but denied: the sandbox cannot widen its policy", "rung", sb.Report().Rung)
				return false, nil
			}
			wide := pol
			wide.Network = sandbox.NetworkAllow
			if err := ps.SetPolicy(wide); err != nil {
				r.logger().Warn("network escalation allowed by the spec but denied", "rung", sb.Report().Rung, "err", err)
				return false, nil
			}
		}
		return true, nil
	}
}

func envErr(err error) error {
	if errors.Is(err, sandbox.ErrNoRung) {
		// Which rungs work does not change between attempts.
		return &NonRetryable{Err: &kindError{kind: "sandbox", err: err}}
	}
	var ie *environment.InfraError
	if errors.As(err, &ie) {
		return &kindError{kind: ie.Phase, err: err}
	}
	return &kindError{kind: "sandbox", err: err}
}

func (r *AgentRunner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

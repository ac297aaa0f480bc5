package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"evals.si/agent"
	"evals.si/checker"
	"evals.si/dataset"
	"evals.si/egress"
	"evals.si/environment"
	"evals.si/evaluate"
	"evals.si/internal/oncekey"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// AgentRunner runs an agent trial: environment → sandbox → agent → diff →
// checker → evaluators.
type AgentRunner struct {
	// Environment is the spec's environment, the ceiling of every
	// record's; nil means the defaults.
	Environment *spec.Environment
	// Caps bound command output (and the trial's memory, see Limits).
	Caps *spec.Caps
	// Budget is the built-in harness's per-trial budget, for efficiency
	// scores; EscalationAllow the escalation kinds it grants.
	Budget          *spec.Budget
	EscalationAllow []string
	Envs            *environment.Manager
	Agent           agent.Agent
	Checkers        *checker.Registry
	Evaluators      []evaluate.Evaluator
	Logger          *slog.Logger
	// ProxyDir holds egress proxies' unix sockets, each proxy's in a
	// directory of its own, when Egress is nil.
	ProxyDir string
	// Egress is where the trials' egress proxies run: where the sandboxes
	// are (a sandbox pool's, for its sandboxes). Nil: in this process.
	Egress egress.Host
	// User, when set, is the task's user (user_simulator). One that can
	// bind to a trial (ForTask) is bound, so its model calls are recorded.
	User agent.User
	// NoSandbox runs the agent without a sandbox: an external harness that
	// advertised no-sandbox (BFCL's calls only the model and Python objects
	// of its own). No environment is prepared, the agent's Task has no
	// Sandbox, and the agent's own verdict grades the trial.
	NoSandbox bool

	// checked remembers the environments whose checker was seen to run
	// on the untouched environment (checkerRuns).
	checked oncekey.Group
	// clk is what healthchecks wait on (nil: real time).
	clk clock
}

// taskUser is a User that binds to one trial's record, trial and sink.
type taskUser interface {
	ForTask(recordID string, trial int, emit trajectory.Sink) agent.User
}

// RunTrial runs one agent trial.
func (r *AgentRunner) RunTrial(ctx context.Context, tc *TrialContext) (*Outcome, error) {
	if r.NoSandbox {
		return r.runWithoutSandbox(ctx, tc)
	}
	// The spec's environment is the ceiling of every record's; with none
	// the defaults are (a nil base would check nothing).
	base := r.Environment
	if base == nil {
		base = &spec.Environment{}
		base.ApplyDefaults()
	}
	env, err := dataset.Environment(base, tc.Record)
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
	outputLimit := r.Caps.CommandOutputBytes()
	// Setup commands run inside Prepare, and in NewSandbox when the rung
	// cannot snapshot.
	setup := environment.SetupOptions{OutputLimit: outputLimit, Run: tc.RunID}
	prepStart := time.Now()
	prep, err := r.Envs.Prepare(ctx, env, setup)
	m.lifecycleSince(prepStart)
	m.span(SpanSetup, prepStart, err)
	if err != nil {
		return nil, envErr(err)
	}
	chk := env.Checker
	hasChecker := chk != nil && len(chk.Command) > 0
	if hasChecker {
		checkStart := time.Now()
		err := r.checkerRuns(ctx, prep, env, setup)
		m.lifecycleSince(checkStart)
		m.span(SpanCheckerPreflight, checkStart, err)
		if err != nil {
			return nil, err
		}
	}
	// The trial's own environment decides its policy, never the one that
	// prepared the setup it shares. A checker that runs in the agent's
	// sandbox with a network of its own is a second phase of it.
	agentPol := environment.TrialPolicy(env)
	checkPol := agentPol
	if hasChecker && !chk.Fresh {
		checkPol = environment.CheckerPolicy(env)
	}
	proxies := &proxySet{}
	defer proxies.Close()
	egressEvents := &phaseEvents{agent: r.trajectoryEvents(tc), checker: r.checkerEvents(tc)}
	pol, phase, err := r.trialNetwork(ctx, proxies, agentPol, checkPol, egressEvents.report)
	if err != nil {
		return nil, &kindError{kind: "sandbox", err: err}
	}
	createStart := time.Now()
	// A fresh checker grades only the diff: nothing the agent left running
	// may outlive its sandbox into the grading, so that sandbox closes in
	// full before the checker's exists.
	agentSetup := setup
	agentSetup.CloseNow = hasChecker && chk.Fresh
	raw, err := prep.NewSandbox(ctx, env, pol, agentSetup)
	m.lifecycleSince(createStart)
	m.span(SpanSandbox, createStart, err)
	if err != nil {
		return nil, envErr(err)
	}
	// The agent, the diff and the checker use the timed sandbox, whose
	// commands get the run's output cap; policy changes (escalation) go to
	// the sandbox itself. A fresh checker closes it before the trial ends.
	sb := timedSandbox{Sandbox: cappedSandbox{Sandbox: raw, outputLimit: outputLimit}, m: m}
	closeAgentSandbox := sync.OnceFunc(func() { sb.Close(context.WithoutCancel(ctx)) })
	defer closeAgentSandbox()
	report := sb.Report()
	iso, _ := json.Marshal(report)
	logf := func(text string) {
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}})
	}
	logf(fmt.Sprintf("sandbox: rung %s (%s), network %s", report.Rung, report.Isolation, report.Network))
	if phase != nil {
		logf(fmt.Sprintf("network: the agent's phase is %s, the checker's %s, both through the trial's egress proxy (a deny phase reaches only the proxy, which refuses every connection)", agentPol.Network, checkPol.Network))
	}
	if err := r.readySandbox(ctx, sb, env, "environment.user", env.User, prep.Workdir, logf); err != nil {
		return nil, err
	}

	task := agent.Task{
		RecordID:       tc.Record.ID,
		Trial:          tc.Trial,
		Instruction:    tc.Record.Input.Prompt(),
		Metadata:       tc.Record.Metadata,
		Sandbox:        agentView(sb, env.User, imageUser(prep)),
		Harness:        sb,
		Workdir:        prep.Workdir,
		CommandTimeout: env.CommandTimeout.D(),
		OutputLimit:    outputLimit,
		Emit:           tc.Emit,
		Escalate:       r.escalate(raw, pol, proxies, phase, egressEvents.report),
	}
	if tc.Record.Input.Messages != nil {
		task.Input = inputMessages(tc.Record.Input)
	}
	if task.User = r.User; task.User != nil {
		if b, ok := r.User.(taskUser); ok {
			task.User = b.ForTask(task.RecordID, task.Trial, task.Emit)
		}
	}
	// The repository's state before the agent, read from its files: an
	// agent that commits, amends or resets cannot hide its change.
	repoBase, err := checker.RecordBase(ctx, sb, prep.Workdir)
	if err != nil {
		return nil, &kindError{kind: "sandbox", err: fmt.Errorf("recording the repository's state before the agent: %w", err)}
	}
	res, err := r.Agent.Run(ctx, task)
	if err != nil {
		// What the attempt spent counts in the summary even though it
		// errored (and is retried).
		return &Outcome{Usage: res.Usage, CostUSD: res.CostUSD, Isolation: iso}, agentErr(err)
	}
	o := &Outcome{Output: res.Output, Usage: res.Usage, CostUSD: res.CostUSD, Isolation: iso}

	diff, isGit, err := checker.CaptureDiffSince(ctx, sb, prep.Workdir, repoBase)
	if err != nil {
		return nil, &kindError{kind: "sandbox", err: fmt.Errorf("capturing diff: %w", err)}
	}
	o.Diff = diff
	if isGit {
		logf(fmt.Sprintf("diff captured: %d bytes", len(diff)))
	}
	if hasChecker {
		start := time.Now()
		var csb checker.Sandbox = sb
		if chk.Fresh {
			// Only the diff carries over: nothing else the agent left
			// (files outside the repository, a replaced interpreter, a
			// process) reaches the grade.
			closeAgentSandbox()
			freshStart := time.Now()
			fresh, err := r.freshSandbox(ctx, prep, env, setup, proxies, egressEvents.checker, logf)
			m.lifecycleSince(freshStart)
			m.span(SpanCheckerSandbox, freshStart, err)
			if err != nil {
				return nil, err
			}
			fsb := timedSandbox{Sandbox: cappedSandbox{Sandbox: fresh, outputLimit: outputLimit}, m: m}
			defer fsb.Close(context.WithoutCancel(ctx))
			csb = fsb
			if isGit {
				logf("checker: in a fresh sandbox of the environment, with only the agent's diff")
			} else {
				logf("checker: in a fresh sandbox of the environment; the workdir is not in a git repository, so the patch it gets is empty and nothing of the agent's reaches it")
			}
		} else if phase != nil {
			egressEvents.checking.Store(true)
			if err := phase.SetPolicy(egressPolicy(checkPol)); err != nil {
				return nil, &kindError{kind: "sandbox", err: fmt.Errorf("switching the sandbox's network to the checker's: %w", err)}
			}
		}
		v, err := checker.Run(ctx, csb, checkerConfig(env, diff), prep.Workdir, r.Checkers)
		if err != nil {
			var ie *checker.InfraError
			if ctx.Err() != nil || !errors.As(err, &ie) || !ie.AgentCausable() {
				return nil, &kindError{kind: "checker", err: fmt.Errorf("after the agent: %w", err)}
			}
			// It ran on the untouched environment (checkerRuns), so what
			// stops it now is what the agent left: the agent's failure.
			v = checker.Verdict{Pass: false, Score: 0, ExitCode: -1,
				Details: "the checker could not run after the agent, though it ran on the untouched environment: " + err.Error()}
			v.Output = v.Details
		}
		o.Verdict = &trajectory.Checker{Command: env.Checker.Command, ExitCode: v.ExitCode, Output: v.Output, Pass: v.Pass, Score: v.Score, Details: v.Details}
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindChecker, DurationMS: time.Since(start).Milliseconds(), Checker: o.Verdict})
	} else if res.Verdict != nil {
		// The agent's own verdict (an external harness's Check) counts only
		// when the spec has no checker: the spec's checker wins.
		o.Verdict = res.Verdict
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindChecker, Checker: o.Verdict})
	}
	budget := r.Budget
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

// trajectoryEvents turns one trial's egress attempts into its events: a
// refusal is a policy event (it counts against policy-violations); a
// connection that went through, in allow mode, is a log event, so what a
// trial reached is on record without being held against it.
func (r *AgentRunner) trajectoryEvents(tc *TrialContext) func(egress.Event) {
	return func(ev egress.Event) {
		host := fmt.Sprintf("%s:%d", ev.Host, ev.Port)
		if ev.Allowed {
			text := "egress: " + ev.Method + " " + host + " allowed"
			if ev.Reason != "" {
				text += " but failed: " + ev.Reason
			}
			_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}})
			return
		}
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindPolicy, Policy: &trajectory.Policy{
			Kind: "network", Host: host, Detail: "refused by egress proxy: " + ev.Reason,
		}})
	}
}

// withProxy starts the egress proxy pol's network needs (allowlist: its
// hosts; allow: everything but the engine's machine) and returns pol with
// its address; deny needs none. Each proxy is the trial's own, with a
// socket of its own, reporting to onEvent.
func (r *AgentRunner) withProxy(ctx context.Context, proxies *proxySet, pol sandbox.Policy, onEvent func(egress.Event)) (sandbox.Policy, error) {
	if pol.Network != sandbox.NetworkAllowlist && pol.Network != sandbox.NetworkAllow {
		return pol, nil
	}
	p, err := r.startProxy(ctx, proxies, pol, onEvent)
	if err != nil {
		return pol, err
	}
	pol.ProxyAddr = p.Addr()
	return pol, nil
}

// startProxy starts a proxy of the trial's own enforcing pol (deny: it
// refuses everything).
func (r *AgentRunner) startProxy(ctx context.Context, proxies *proxySet, pol sandbox.Policy, onEvent func(egress.Event)) (egress.Handle, error) {
	p, err := r.egressHost().StartProxy(ctx, egressPolicy(pol), onEvent)
	if err != nil {
		return nil, err
	}
	proxies.add(p)
	return p, nil
}

func (r *AgentRunner) egressHost() egress.Host {
	if r.Egress != nil {
		return r.Egress
	}
	return egress.Local{SocketDir: r.ProxyDir, Logger: r.Logger}
}

// egressPolicy is what a proxy lets through for a sandbox policy:
// allowlist its hosts, allow everything but the engine's machine, deny
// nothing.
func egressPolicy(pol sandbox.Policy) egress.Policy {
	var ep egress.Policy
	switch pol.Network {
	case sandbox.NetworkAllowlist:
		ep.AllowHosts = pol.AllowHosts
	case sandbox.NetworkAllow:
		ep.AllowAll = true
	}
	return ep
}

// proxySet is the egress proxies of one trial, closed when it ends.
type proxySet struct {
	mu sync.Mutex
	ps []egress.Handle
}

func (s *proxySet) add(p egress.Handle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ps = append(s.ps, p)
}

func (s *proxySet) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ps {
		p.Close()
	}
	s.ps = nil
}

// checkerRuns makes sure, once per distinct environment, that env's
// checker can run on the untouched environment: in a throwaway sandbox of
// the trial's environment it writes the checker's files, runs the command
// and parses the result. Any verdict will do, and so will a timeout (the
// command ran); a checker that cannot start, cannot have its files written
// or leaves nothing to parse is an infrastructure error, reported before
// any agent runs. Having passed, the same failure after an agent is the
// agent's doing (see RunTrial).
func (r *AgentRunner) checkerRuns(ctx context.Context, prep *environment.Prepared, env *spec.Environment, setup environment.SetupOptions) error {
	b, _ := json.Marshal(env)
	sum := sha256.Sum256(b)
	key := prep.ID + "-" + hex.EncodeToString(sum[:8])
	return r.checked.Do(ctx, key, func(ctx context.Context) error {
		return r.runChecker(ctx, prep, env, setup)
	})
}

func (r *AgentRunner) runChecker(ctx context.Context, prep *environment.Prepared, env *spec.Environment, setup environment.SetupOptions) error {
	// Its own proxy, reporting to the log: what the check reaches is not
	// the trial's doing.
	proxies := &proxySet{}
	defer proxies.Close()
	raw, err := r.freshSandbox(ctx, prep, env, setup, proxies, func(ev egress.Event) {
		r.logger().Debug("checker check: egress", "host", ev.Host, "port", ev.Port, "allowed", ev.Allowed, "reason", ev.Reason)
	}, func(text string) { r.logger().Debug("checker check: " + text) })
	if err != nil {
		return err
	}
	defer raw.Close(context.WithoutCancel(ctx))
	sb := cappedSandbox{Sandbox: raw, outputLimit: r.Caps.CommandOutputBytes()}
	// As after an agent that changed nothing: an empty patch.
	_, err = checker.Run(ctx, sb, checkerConfig(env, ""), prep.Workdir, r.Checkers)
	var ie *checker.InfraError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &ie) && ie.Cause == checker.CauseTimeout:
		return nil
	case errors.As(err, &ie) && ie.Cause == checker.CauseSandbox:
		return &kindError{kind: "checker", err: fmt.Errorf("on the untouched environment, before any agent: %w", err)}
	}
	// The same every time: retrying cannot help.
	return &NonRetryable{Err: &kindError{kind: "checker", err: fmt.Errorf("cannot run on the untouched environment, before any agent: %w", err)}}
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
// sandbox's network to allow for the rest of the agent's phase, through an
// allow-all egress proxy of the trial's own (the engine's machine stays
// out of reach). A sandbox made with a phase proxy (phase) widens at that
// proxy, which every rung reaches the same way; any other needs a rung
// that can widen its policy mid-trial.
func (r *AgentRunner) escalate(sb sandbox.Sandbox, pol sandbox.Policy, proxies *proxySet, phase egress.Handle, onEvent func(egress.Event)) func(ctx context.Context, kind, reason string) (bool, error) {
	allow := r.EscalationAllow
	var mu sync.Mutex
	widened := false
	return func(ctx context.Context, kind, reason string) (bool, error) {
		if !slices.Contains(allow, kind) {
			return false, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if kind != "network" || widened || pol.Network == sandbox.NetworkAllow {
			return true, nil
		}
		if phase != nil {
			if err := phase.SetPolicy(egressPolicy(sandbox.Policy{Network: sandbox.NetworkAllow})); err != nil {
				r.logger().Warn("network escalation allowed by the spec but denied", "rung", sb.Report().Rung, "err", err)
				return false, nil
			}
			widened = true
			return true, nil
		}
		// A rung that cannot widen its policy mid-trial denies the
		// request (recorded as such) rather than failing the trial.
		ps, ok := sb.(policySetter)
		if !ok {
			r.logger().Warn("network escalation allowed by the spec but denied: the sandbox cannot widen its policy", "rung", sb.Report().Rung)
			return false, nil
		}
		wide, err := r.withProxy(ctx, proxies, sandbox.Policy{Network: sandbox.NetworkAllow}, onEvent)
		if err != nil {
			r.logger().Warn("network escalation allowed by the spec but denied", "rung", sb.Report().Rung, "err", err)
			return false, nil
		}
		if err := ps.SetPolicy(wide); err != nil {
			r.logger().Warn("network escalation allowed by the spec but denied", "rung", sb.Report().Rung, "err", err)
			return false, nil
		}
		widened = true
		return true, nil
	}
}

// agentErr is an agent's failure as a trial error. An error that says
// which kind it is keeps it (the built-in agent's failed model call is a
// model error, as in a plain run); any other is the agent's. The text is
// the agent's own: every surface shows the kind beside it, so it is not
// written into it too ("agent: agent: ...").
func agentErr(err error) error {
	var k ErrorKinder
	if errors.As(err, &k) && k.ErrorKind() != "" {
		return err
	}
	return &kindError{kind: "agent", err: err}
}

// envErr files an environment failure under its phase (image, setup,
// sandbox, service).
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

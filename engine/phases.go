package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"evals.si/egress"
	"evals.si/environment"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// A trial has two phases, the agent's and the checker's. The checker runs
// as checker.user (else environment.user), with checker.network (else the
// agent's), in the agent's sandbox or, with checker.fresh, in a new
// sandbox of the environment that only the agent's diff reaches.

// trialNetwork starts the egress proxy the agent's sandbox needs and
// returns the policy to create the sandbox with. When the checker's
// network differs from the agent's (and the checker runs in the agent's
// sandbox), one proxy serves both phases: the proxy enforces the agent's
// phase until SetPolicy switches it to the checker's (phase is that proxy;
// nil when there is one phase). Such a sandbox is made in allowlist mode
// whatever its phases, the one mode in which every rung either sends all
// traffic through the proxy or refuses to make the sandbox (a rung whose
// allow is its own network, not the proxy, would leave a deny phase
// open): a deny phase reaches only the proxy, which refuses every
// connection, and an allow phase reaches what an allow-all proxy lets
// through.
func (r *AgentRunner) trialNetwork(ctx context.Context, proxies *proxySet, agentPol, checkPol sandbox.Policy, onEvent func(egress.Event)) (pol sandbox.Policy, phase egress.Handle, err error) {
	if samePolicy(agentPol, checkPol) {
		pol, err := r.withProxy(ctx, proxies, agentPol, onEvent)
		return pol, nil, err
	}
	p, err := r.startProxy(ctx, proxies, agentPol, onEvent)
	if err != nil {
		return sandbox.Policy{}, nil, err
	}
	pol = sandbox.Policy{Network: sandbox.NetworkAllowlist, ProxyAddr: p.Addr()}
	// The hosts only shape the sandbox's own view (NO_PROXY).
	for _, h := range slices.Concat(agentPol.AllowHosts, checkPol.AllowHosts) {
		if !slices.Contains(pol.AllowHosts, h) {
			pol.AllowHosts = append(pol.AllowHosts, h)
		}
	}
	return pol, p, nil
}

func samePolicy(a, b sandbox.Policy) bool {
	if a.Network != b.Network {
		return false
	}
	return a.Network != sandbox.NetworkAllowlist || slices.Equal(slices.Sorted(slices.Values(a.AllowHosts)), slices.Sorted(slices.Values(b.AllowHosts)))
}

// phaseEvents sends the egress proxy's events to the phase that caused
// them: the agent's count against it (policy events), the checker's are
// only logged.
type phaseEvents struct {
	agent, checker func(egress.Event)
	checking       atomic.Bool
}

func (p *phaseEvents) report(ev egress.Event) {
	if p.checking.Load() {
		p.checker(ev)
		return
	}
	p.agent(ev)
}

// checkerEvents logs what the checker's phase reached or was refused: the
// task's checker, not the agent, made those attempts.
func (r *AgentRunner) checkerEvents(tc *TrialContext) func(egress.Event) {
	return func(ev egress.Event) {
		text := fmt.Sprintf("checker egress: %s %s:%d ", ev.Method, ev.Host, ev.Port)
		switch {
		case !ev.Allowed:
			text += "refused: " + ev.Reason
		case ev.Reason != "":
			text += "allowed but failed: " + ev.Reason
		default:
			text += "allowed"
		}
		_ = tc.Emit.Emit(trajectory.Event{Kind: trajectory.KindLog, Log: &trajectory.Log{Text: text}})
	}
}

// readySandbox makes a new sandbox of env ready for its first command:
// the user the phase runs as (user, from field) must exist in it, and the
// task's service is started and healthy. A user the sandbox cannot run as
// is the environment's failure (an infrastructure error), never a score.
func (r *AgentRunner) readySandbox(ctx context.Context, sb serviceStarter, env *spec.Environment, field, user, workdir string, logf func(string)) error {
	if user != "" {
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, User: user, Timeout: time.Minute}); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &kindError{kind: "sandbox", err: fmt.Errorf("%s %q: the sandbox cannot run commands as this user (is it in the image's /etc/passwd? a setup step can create it with useradd): %w", field, user, err)}
		}
	}
	return startService(ctx, sb, env, workdir, r.clock(), logf)
}

// freshSandbox makes a sandbox for the checker alone: a new one of env,
// restored from its setup, with the checker's network policy (through a
// proxy of its own in proxies, reporting to onEvent) and the task's
// service started and healthy, as the agent's was. The caller closes it.
func (r *AgentRunner) freshSandbox(ctx context.Context, prep *environment.Prepared, env *spec.Environment, setup environment.SetupOptions, proxies *proxySet, onEvent func(egress.Event), logf func(string)) (sandbox.Sandbox, error) {
	pol, err := r.withProxy(ctx, proxies, environment.CheckerPolicy(env), onEvent)
	if err != nil {
		return nil, &kindError{kind: "sandbox", err: err}
	}
	sb, err := prep.NewSandbox(ctx, env, pol, setup)
	if err != nil {
		return nil, envErr(err)
	}
	// The checker's own user must exist, not the agent's.
	if err := r.readySandbox(ctx, sb, env, "the checker's user", checkerUser(env), prep.Workdir, logf); err != nil {
		sb.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

// checkerUser is who runs the checker's command: checker.user, else
// environment.user.
func checkerUser(env *spec.Environment) string {
	if c := env.Checker; c != nil && c.User != "" {
		return c.User
	}
	return env.User
}

// checkerConfig is env's checker as checker.Run takes it: its user
// defaulted to environment.user, and the agent's diff among its files at
// patch_file (relative: the workdir). The files stay the engine's, written
// as root, as a Dockerfile's COPY is.
func checkerConfig(env *spec.Environment, diff string) spec.Checker {
	c := *env.Checker
	c.User = checkerUser(env)
	if c.PatchFile != "" {
		files := make(map[string]string, len(c.Files)+1)
		maps.Copy(files, c.Files)
		files[c.PatchFile] = diff
		c.Files = files
	}
	return c
}

// imageUser is the image's USER, the sandbox's default user.
func imageUser(prep *environment.Prepared) string {
	if prep.Image == nil {
		return ""
	}
	return prep.Image.User
}

func (r *AgentRunner) clock() clock {
	if r.clk != nil {
		return r.clk
	}
	return realClock{}
}

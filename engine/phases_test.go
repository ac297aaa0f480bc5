package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"evals.si/agent"
	"evals.si/checker"
	"evals.si/environment"
	"evals.si/image"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/nethost"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// funcAgent is an agent whose run is a test's function.
type funcAgent func(ctx context.Context, t agent.Task) error

func (f funcAgent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	return agent.Result{StopReason: agent.StopAnswered}, f(ctx, t)
}

// trialRun is one trial of a real agent runner over bwrap.
type trialRun struct {
	mu     sync.Mutex
	events []trajectory.Event
}

func (tr *trialRun) logs() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, e := range tr.events {
		if e.Kind == trajectory.KindLog {
			out = append(out, e.Log.Text)
		}
	}
	return out
}

func (tr *trialRun) policyEvents() []trajectory.Policy {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []trajectory.Policy
	for _, e := range tr.events {
		if e.Kind == trajectory.KindPolicy {
			out = append(out, *e.Policy)
		}
	}
	return out
}

// newRunner makes an agent runner whose environments use bwrap (skipping
// where it does not work), with the test parser "test:args" registered: it
// passes when the command exited 0 and puts its parser_args in Details.
func newRunner(t *testing.T, env *spec.Environment, ag agent.Agent) *AgentRunner {
	t.Helper()
	return newRunnerWith(t, newEnvs(t), env, ag)
}

// newEnvs is an environment manager over bwrap; runners that share one
// share its images and prepared setups.
func newEnvs(t *testing.T) *environment.Manager {
	t.Helper()
	rung := bwraptest.Rung(t)
	imgs, err := image.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	m := environment.NewManager(imgs, []sandbox.Rung{rung}, t.TempDir(), slog.Default())
	t.Cleanup(func() { m.Close() })
	return m
}

func newRunnerWith(t *testing.T, m *environment.Manager, env *spec.Environment, ag agent.Agent) *AgentRunner {
	t.Helper()
	if env.Sandbox == nil {
		env.Sandbox = &spec.SandboxPolicy{}
	}
	env.Sandbox.Ladder = []string{"bwrap"}
	env.ApplyDefaults()
	reg := checker.NewRegistry()
	reg.Register("test:args", func(_ context.Context, res sandbox.ExecResult, _ checker.Sandbox, _ string, args spec.JSON) (checker.Verdict, error) {
		pass := res.ExitCode == 0
		return checker.Verdict{Pass: pass, Score: map[bool]float64{true: 1}[pass], Details: "args " + string(args)}, nil
	})
	return &AgentRunner{Environment: env, Envs: m, Agent: ag, Checkers: reg, ProxyDir: t.TempDir()}
}

func (r *AgentRunner) trial(t *testing.T) (*Outcome, *trialRun, error) {
	t.Helper()
	tr := &trialRun{}
	tc := &TrialContext{
		Record: spec.Record{ID: "rec", Input: spec.Input{Text: "do the task"}},
		Emit: trajectory.SinkFunc(func(e trajectory.Event) error {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.events = append(tr.events, e)
			return nil
		}),
	}
	o, err := r.RunTrial(context.Background(), tc)
	return o, tr, err
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func mustExec(ctx context.Context, t agent.Task, script string) (sandbox.ExecResult, error) {
	res, err := t.Sandbox.Exec(ctx, sandbox.ExecRequest{Argv: sh(script)})
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("%q exited %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res, nil
}

// gitSetup makes the workdir a repository with app.txt committed.
var gitSetup = spec.Steps("git init -q . && git add -A && git -c user.email=t@t -c user.name=t commit -qm base")

// A fresh checker grades a new sandbox of the environment where only the
// agent's diff, at patch_file, carries over: what the agent left outside
// the repository (a file in /tmp, a replaced tool on the PATH) is absent,
// the change in the repository arrives only as the patch, and parser_args
// reach the parser. In the agent's own sandbox the same leftovers are seen.
func TestFreshCheckerSeesOnlyTheDiff(t *testing.T) {
	// Passes only where the agent's leftovers are absent and the work tree
	// is the untouched one with the patch beside it.
	fresh := `test ! -e /tmp/outside && test ! -e /tmp/bin/python3 && grep -q '^v1$' app.txt && grep -q '^+v2$' /tmp/agent.patch && git apply /tmp/agent.patch && grep -q '^v2$' app.txt`
	for _, tc := range []struct {
		name  string
		fresh bool
		pass  bool
	}{
		{"fresh", true, true},
		{"in the agent's sandbox", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &spec.Environment{
				Files:   map[string]string{"app.txt": "v1\n"},
				Setup:   gitSetup,
				Sandbox: &spec.SandboxPolicy{Workdir: "/work"},
				Checker: &spec.Checker{Command: sh(fresh), Parser: "test:args", ParserArgs: spec.JSON(`{"tests":["a"]}`), Fresh: tc.fresh, PatchFile: "/tmp/agent.patch"},
			}
			r := newRunner(t, env, funcAgent(func(ctx context.Context, task agent.Task) error {
				if err := task.Sandbox.WriteFile(ctx, "app.txt", []byte("v2\n"), 0o644); err != nil {
					return err
				}
				_, err := mustExec(ctx, task, "echo planted > /tmp/outside && mkdir -p /tmp/bin && printf '#!/bin/sh\\nexit 0\\n' > /tmp/bin/python3")
				return err
			}))
			o, tr, err := r.trial(t)
			if err != nil {
				t.Fatal(err)
			}
			if o.Verdict == nil || o.Verdict.Pass != tc.pass {
				t.Fatalf("verdict %+v, want pass=%v; logs %q", o.Verdict, tc.pass, tr.logs())
			}
			if o.Verdict.Details != `args {"tests":["a"]}` {
				t.Errorf("the parser got %q, want the checker's parser_args", o.Verdict.Details)
			}
			if !strings.Contains(o.Diff, "+v2") {
				t.Errorf("diff %q", o.Diff)
			}
		})
	}
}

// A checker with a network of its own switches the agent's sandbox at the
// trial's egress proxy: the agent's phase reaches the test host only when
// its policy allows it, the checker's likewise, and only the agent's
// refusals count against it (policy events); the checker's are logged.
func TestPerPhaseNetwork(t *testing.T) {
	host := nethost.New(t)
	fetch := "curl -sf --max-time 20 http://" + host.Addr + "/"
	allow := []string{host.Addr}
	for _, tc := range []struct {
		name                string
		agent, checker      string
		agentHosts, chHosts []string
		agentReaches, pass  bool
	}{
		{"agent deny, checker allowlist", "deny", "allowlist", nil, allow, false, true},
		{"agent allowlist, checker deny", "allowlist", "deny", allow, nil, true, false},
		{"agent deny, checker allow", "deny", "allow", nil, nil, false, true},
		{"agent allow, checker deny", "allow", "deny", nil, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := host.Hits()
			var agentExit int
			env := &spec.Environment{
				Sandbox: &spec.SandboxPolicy{Workdir: "/work", Network: tc.agent, AllowHosts: tc.agentHosts},
				Checker: &spec.Checker{Command: sh(fetch), Network: tc.checker, AllowHosts: tc.chHosts},
			}
			r := newRunner(t, env, funcAgent(func(ctx context.Context, task agent.Task) error {
				res, err := task.Sandbox.Exec(ctx, sandbox.ExecRequest{Argv: sh(fetch)})
				agentExit = res.ExitCode
				return err
			}))
			o, tr, err := r.trial(t)
			if err != nil {
				t.Fatal(err)
			}
			if (agentExit == 0) != tc.agentReaches {
				t.Errorf("the agent's fetch exited %d, want reached=%v", agentExit, tc.agentReaches)
			}
			if o.Verdict == nil || o.Verdict.Pass != tc.pass {
				t.Errorf("checker verdict %+v, want pass=%v (the checker's fetch)", o.Verdict, tc.pass)
			}
			// The preflight's fetch goes through a proxy of its own, with
			// the checker's policy.
			want := 0
			for _, reached := range []bool{tc.agentReaches, tc.pass, tc.pass} {
				if reached {
					want++
				}
			}
			if got := host.Hits() - before; got != want {
				t.Errorf("the test host answered %d requests, want %d", got, want)
			}
			refusals := tr.policyEvents()
			if tc.agentReaches != (len(refusals) == 0) {
				t.Errorf("policy events %+v: want one only for the agent's refused fetch", refusals)
			}
			checkerLogged := false
			for _, l := range tr.logs() {
				checkerLogged = checkerLogged || strings.HasPrefix(l, "checker egress:")
			}
			if !checkerLogged {
				t.Errorf("no checker egress log in %q", tr.logs())
			}
		})
	}
}

// startServiceOrMissing reports the service facility missing when the
// bwrap rung cannot start services here.
func startServiceOrMissing(t *testing.T) {
	t.Helper()
	sb := bwraptest.New(t, "/work")
	_, err := sb.StartService(context.Background(), sandbox.ExecRequest{Argv: []string{"true"}})
	if errors.Is(err, errors.ErrUnsupported) {
		testenv.Missing(t, "bwrap services", err.Error())
	}
}

// The task's service starts before the agent and its healthcheck is waited
// on; a healthcheck that keeps failing, or a service that exits, is an
// infrastructure error (kind service) with the check's and the service's
// output, never a score.
func TestServiceAndHealthcheck(t *testing.T) {
	startServiceOrMissing(t)
	// Failures in a start period do not count, so a service that is slow
	// to come up is waited for however long that takes here.
	startPeriod := spec.Duration(10 * 60e9)
	for _, tc := range []struct {
		name        string
		service     []string
		check       []string
		startPeriod spec.Duration
		wantErr     string
	}{
		{"healthy", sh("sleep 1; echo up > /tmp/state; echo service-says-hi; exec sleep 600"), sh("cat /tmp/state"), startPeriod, ""},
		{"healthcheck fails", sh("echo service-output-here; exec sleep 600"), sh("echo not-ready-yet; exit 1"), 0, "not-ready-yet"},
		{"service exits", sh("echo dying-words; exit 3"), sh("exit 1"), startPeriod, "exited with code 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := spec.Healthcheck{Command: tc.check, Interval: spec.Duration(100e6), Timeout: spec.Duration(60e9),
				StartPeriod: tc.startPeriod, StartInterval: spec.Duration(100e6), Retries: 2}
			env := &spec.Environment{
				Sandbox:     &spec.SandboxPolicy{Workdir: "/work"},
				Service:     &spec.Service{Command: tc.service},
				Healthcheck: &hc,
			}
			ran := false
			r := newRunner(t, env, funcAgent(func(ctx context.Context, task agent.Task) error {
				ran = true
				_, err := mustExec(ctx, task, "grep -q up /tmp/state")
				return err
			}))
			_, tr, err := r.trial(t)
			if tc.wantErr == "" {
				if err != nil || !ran {
					t.Fatalf("trial: %v (agent ran: %v)", err, ran)
				}
				logs := strings.Join(tr.logs(), "\n")
				if !strings.Contains(logs, "service started") || !strings.Contains(logs, "service healthy after") {
					t.Errorf("logs %q", logs)
				}
				return
			}
			if err == nil || ran {
				t.Fatalf("trial: %v (agent ran: %v), want an infrastructure error before the agent", err, ran)
			}
			if kindOf(err) != "service" || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error (kind %s) %v, want kind service mentioning %q", kindOf(err), err, tc.wantErr)
			}
			if tc.name == "healthcheck fails" && !strings.Contains(err.Error(), "service-output-here") {
				t.Errorf("error %v lacks the service's output", err)
			}
			if tc.name == "service exits" && !strings.Contains(err.Error(), "dying-words") {
				t.Errorf("error %v lacks the service's output", err)
			}
		})
	}
}

// The checker's sandboxes get the task's service as the agent's did: the
// preflight's and, with checker.fresh, the fresh one, each started and
// healthy before the checker runs.
func TestFreshCheckerSandboxRunsTheService(t *testing.T) {
	startServiceOrMissing(t)
	env := &spec.Environment{
		Sandbox:     &spec.SandboxPolicy{Workdir: "/work"},
		Service:     &spec.Service{Command: sh("echo up-$$ > /tmp/state; exec sleep 600")},
		Healthcheck: &spec.Healthcheck{Command: sh("test -s /tmp/state"), Interval: spec.Duration(100e6), StartInterval: spec.Duration(100e6), StartPeriod: spec.Duration(600e9)},
		Checker:     &spec.Checker{Command: sh("grep -q up- /tmp/state && test ! -e /tmp/agent-was-here"), Fresh: true, PatchFile: "agent.patch"},
	}
	r := newRunner(t, env, funcAgent(func(ctx context.Context, task agent.Task) error {
		_, err := mustExec(ctx, task, "grep -q up- /tmp/state && touch /tmp/agent-was-here")
		return err
	}))
	o, tr, err := r.trial(t)
	if err != nil {
		t.Fatal(err)
	}
	if o.Verdict == nil || !o.Verdict.Pass {
		t.Fatalf("verdict %+v, want a pass: the fresh sandbox's own service; logs %q", o.Verdict, tr.logs())
	}
	started := 0
	for _, l := range tr.logs() {
		if strings.HasPrefix(l, "service healthy after") {
			started++
		}
	}
	if started != 2 {
		t.Errorf("the trial's log has %d healthy services, want 2 (the agent's sandbox, the fresh checker's): %q", started, tr.logs())
	}
}

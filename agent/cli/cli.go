// Package cli is the CLI agent (target.agent.cli): the caller's own agent
// program, run inside the task's sandbox in its workdir.
//
// What it does, and why:
//
//   - The instruction replaces every {instruction} in the command, quoted for
//     sh; a command without {instruction} gets the instruction on its
//     standard input. The command runs under /bin/sh -c.
//   - install commands are appended to the environment's setup (see
//     ShapeEnvironment): they run once per distinct environment, with the
//     environment's setup_network, and their result is in the setup snapshot
//     every trial starts from.
//   - Only the variables named in env_from enter the sandbox, on top of the
//     sandbox's own environment (the environment's env, HOME, PATH and, with
//     an allowlist, the proxy variables): every rung starts commands from a
//     cleared environment, so nothing else of the worker's environment leaks
//     in. A missing worker variable fails New, naming both names. The values
//     are redacted from everything the agent records.
//   - allow_hosts turn the sandbox's network into an allowlist reached
//     through the egress proxy, merged with environment.sandbox.allow_hosts.
//     With network: deny (the default) allow_hosts still open exactly those
//     hosts; with network: allow the network stays open.
//   - timeout bounds the agent command; without it, the harness's wall-clock
//     budget (harness.builtin.budget.wall_clock) when there is one, else
//     DefaultTimeout.
//   - output_format names the format of the agent's standard output
//     (dsh-json, claude-stream-json, codex-json); its lines become model_call,
//     message, tool_call and tool_result events, with token usage and cost
//     where the format reports them. Without it, standard output is the
//     answer and the run has no steps. The output is parsed after the
//     command ends, one line at a time, and is bounded by the output cap;
//     it streams while the command runs, and each event carries the time
//     its line arrived (a model call lasts from the line before it, a tool
//     from its call to its result). The model calls add up to the trial's
//     usage and cost: a session total the format reports (Claude Code's
//     result) is shared out over them.
//   - A non-zero exit is the agent's outcome, not an infrastructure error:
//     it is recorded (a log event with the tail of stderr, and the stop
//     reason StopExited) and the checker still grades the end state. The run
//     is an error when the command could not start at all (the sandbox
//     failed, or sh reported 126/127: the program is not there or not
//     executable, the install is missing), and when the format says the
//     agent's own run failed: its model provider answered with an error
//     (Claude Code's API errors, Codex's turn.failed, or a provider error
//     reported before a non-zero exit) or the program crashed (Claude
//     Code's error_during_execution). The engine retries such errors and
//     reports the trial errored; the agent's own stops (its turn limit,
//     budget, timeout) stay scores.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"evals.si/agent"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/spec"
	"evals.si/trajectory"
)

// DefaultTimeout bounds the agent command when neither cli.timeout nor a
// wall-clock budget is set.
const DefaultTimeout = 30 * time.Minute

// Stop reasons of a CLI agent beyond agent.Stop*.
const (
	// StopExited: the command exited non-zero (or was killed) without the
	// format reporting a reason of its own.
	StopExited = "exited"
	// StopAgentError: the agent's own output says its run failed (Claude
	// Code's error_during_execution, Codex's turn.failed, a DeepSeek Harness
	// turn ending in error).
	StopAgentError = "agent_error"
)

// Output formats.
const (
	FormatDSH    = "dsh-json"
	FormatClaude = "claude-stream-json"
	FormatCodex  = "codex-json"
)

// Formats lists the output formats this package reads.
func Formats() []string { return []string{FormatDSH, FormatClaude, FormatCodex} }

// outputLimit caps the agent's standard output (and standard error) when a
// format is parsed: a long session's event stream is much larger than an
// answer. Without a format the run's caps.command_output_kb applies; a
// larger one wins over this.
const outputLimit = 16 << 20

// Agent is a configured CLI agent; it is safe for concurrent trials.
type Agent struct {
	cfg     spec.CLIAgent
	env     map[string]string
	timeout time.Duration
	pricing model.Pricing
	logger  *slog.Logger
	redact  *strings.Replacer
}

// Option configures an Agent.
type Option func(*Agent)

// WithDefaultTimeout bounds the command when cli.timeout is unset (the
// harness's wall-clock budget); 0 keeps DefaultTimeout.
func WithDefaultTimeout(d time.Duration) Option {
	return func(a *Agent) {
		if d > 0 && a.cfg.Timeout == 0 {
			a.timeout = d
		}
	}
}

// WithPricing prices model calls whose format reports tokens and a model
// but no cost.
func WithPricing(p model.Pricing) Option { return func(a *Agent) { a.pricing = p } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(a *Agent) { a.logger = l } }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// New validates cfg and resolves env_from through getenv (the worker's
// environment, os.Getenv). A worker variable that is unset or empty is an
// error naming both names; its value never appears in an error or a log.
func New(cfg spec.CLIAgent, getenv func(string) string, opts ...Option) (*Agent, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, errors.New("cli.command is empty: give the command that runs the agent, e.g. claude -p {instruction}")
	}
	if cfg.OutputFormat != "" && !slices.Contains(Formats(), cfg.OutputFormat) {
		return nil, fmt.Errorf("cli.output_format %q is not a format this build reads: use one of %s, or leave it out to take standard output as the answer", cfg.OutputFormat, strings.Join(Formats(), ", "))
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("cli.timeout %s is negative", cfg.Timeout.D())
	}
	for i, h := range cfg.AllowHosts {
		if _, port, ok := strings.Cut(h, ":"); !ok || port == "" {
			return nil, fmt.Errorf("cli.allow_hosts[%d] %q names no port: write host:port, e.g. api.anthropic.com:443", i, h)
		}
	}
	a := &Agent{cfg: cfg, env: map[string]string{}, timeout: DefaultTimeout, logger: slog.Default()}
	if cfg.Timeout > 0 {
		a.timeout = cfg.Timeout.D()
	}
	names := make([]string, 0, len(cfg.EnvFrom))
	for name := range cfg.EnvFrom {
		names = append(names, name)
	}
	slices.Sort(names)
	var secrets []string
	for _, name := range names {
		from := cfg.EnvFrom[name]
		if !envName.MatchString(name) {
			return nil, fmt.Errorf("cli.env_from: %q is not a variable name (letters, digits and _, not starting with a digit)", name)
		}
		if !envName.MatchString(from) {
			return nil, fmt.Errorf("cli.env_from.%s: %q is not a variable name (letters, digits and _, not starting with a digit)", name, from)
		}
		v := getenv(from)
		if v == "" {
			return nil, fmt.Errorf("cli.env_from.%s: the worker variable %s is not set (or is empty); set %s in the worker's environment, it becomes %s in the sandbox", name, from, from, name)
		}
		a.env[name] = v
		secrets = append(secrets, v)
	}
	a.redact = redactor(secrets)
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Timeout is how long the agent command may run.
func (a *Agent) Timeout() time.Duration { return a.timeout }

// ShapeEnvironment adds install to the setup and allow_hosts to the
// sandbox's allowlist (agent.EnvironmentShaper).
func (a *Agent) ShapeEnvironment(env *spec.Environment) *spec.Environment {
	if len(a.cfg.Install) == 0 && len(a.cfg.AllowHosts) == 0 {
		return env
	}
	out := &spec.Environment{}
	if env != nil {
		*out = *env
	}
	if len(a.cfg.Install) > 0 {
		out.Setup = append(slices.Clone(out.Setup), spec.Steps(a.cfg.Install...)...)
	}
	if len(a.cfg.AllowHosts) > 0 {
		sb := &spec.SandboxPolicy{}
		if out.Sandbox != nil {
			*sb = *out.Sandbox
		}
		hosts := slices.Clone(sb.AllowHosts)
		for _, h := range a.cfg.AllowHosts {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		sb.AllowHosts = hosts
		// network: allow already reaches every host; deny (the default)
		// and allowlist become an allowlist with the agent's hosts.
		if sb.Network != sandbox.NetworkAllow {
			sb.Network = sandbox.NetworkAllowlist
		}
		out.Sandbox = sb
	}
	return out
}

// Run runs the agent command once per user turn (once without a user
// simulator) and records what its output shows.
func (a *Agent) Run(ctx context.Context, t agent.Task) (agent.Result, error) {
	if t.Sandbox == nil {
		return agent.Result{}, errors.New("cli agent: task has no sandbox")
	}
	if t.Emit == nil {
		return agent.Result{}, errors.New("cli agent: task has no event sink")
	}
	r := &run{a: a, task: &t, log: a.logger.With("record", t.RecordID, "trial", t.Trial)}
	instruction := t.Instruction
	if strings.TrimSpace(instruction) == "" {
		return agent.Result{}, fmt.Errorf("cli agent: record %q has no instruction", t.RecordID)
	}
	var conversation []trajectory.Message
	for _, m := range t.Input {
		if m.Role != trajectory.RoleSystem {
			conversation = append(conversation, m)
		}
	}
	if len(conversation) == 0 {
		conversation = []trajectory.Message{{Role: trajectory.RoleUser, Content: instruction}}
	}
	for turn := 1; ; turn++ {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps,
			Message: &trajectory.Message{Role: trajectory.RoleUser, Content: instruction}}); err != nil {
			return r.res, err
		}
		out, stop, err := r.turn(ctx, instruction)
		if err != nil {
			if ctx.Err() != nil {
				return r.canceled(ctx.Err())
			}
			return r.fail(err)
		}
		r.res.Output = out
		conversation = append(conversation, trajectory.Message{Role: trajectory.RoleAssistant, Content: out})
		if stop.reason != agent.StopAnswered || t.User == nil {
			return r.stop(stop)
		}
		next, done, err := t.User.Reply(ctx, conversation)
		if err != nil {
			return r.fail(fmt.Errorf("user simulator after turn %d: %w", turn, err))
		}
		if done {
			return r.stop(stop)
		}
		instruction = next
		conversation = append(conversation, trajectory.Message{Role: trajectory.RoleUser, Content: next})
	}
}

// stopInfo is why a turn ended.
type stopInfo struct{ reason, detail string }

// run is the state of one Run.
type run struct {
	a     *Agent
	task  *agent.Task
	log   *slog.Logger
	res   agent.Result
	steps int
}

// turn runs the command once with instruction and records its output.
func (r *run) turn(ctx context.Context, instruction string) (string, stopInfo, error) {
	a := r.a
	req := sandbox.ExecRequest{Env: a.env, Workdir: r.task.Workdir, Timeout: a.timeout, OutputLimit: r.task.OutputLimit}
	command := a.cfg.Command
	if strings.Contains(command, "{instruction}") {
		command = strings.ReplaceAll(command, "{instruction}", shellQuote(instruction))
	} else {
		req.Stdin = []byte(instruction)
	}
	req.Argv = []string{"/bin/sh", "-c", command}
	if a.cfg.OutputFormat != "" {
		req.OutputLimit = max(outputLimit, sandbox.OutputLimit(req))
	}
	start := time.Now()
	// Stdout's pieces are timed as they arrive, so each event of the
	// agent's output carries the time its line was written, not the time
	// the output was read after the command ended.
	arr := &arrivals{}
	req.Output = func(stderr bool, b []byte) {
		if !stderr {
			arr.add(len(b), time.Now())
		}
	}
	res, err := r.task.Sandbox.Exec(ctx, req)
	end := time.Now()
	if err == nil && ctx.Err() != nil {
		// The command was killed because the caller gave up, not by its
		// own doing: that is no outcome of the agent's.
		err = ctx.Err()
	}
	if err != nil {
		return "", stopInfo{}, fmt.Errorf("running the agent command in the sandbox: %w", err)
	}
	r.log.Debug("cli agent command ended", "exit", res.ExitCode, "timed_out", res.TimedOut, "took", end.Sub(start), "stdout_bytes", len(res.Stdout), "streamed_bytes", arr.bytes())
	if !res.TimedOut && (res.ExitCode == 126 || res.ExitCode == 127) {
		return "", stopInfo{}, fmt.Errorf("the agent command could not start (sh exited %d: not found or not executable; is it installed by cli.install or the image?): %s", res.ExitCode, r.a.redactString(tail(res.Stderr, 1000)))
	}
	for _, d := range res.Denials {
		if err := r.emit(trajectory.Event{Kind: trajectory.KindPolicy, Step: r.steps, Policy: &trajectory.Policy{Kind: d.Kind, Detail: d.Detail}}); err != nil {
			return "", stopInfo{}, err
		}
	}
	if res.Truncated {
		if err := r.logf("agent output cut at the %d-byte output cap; what came after is not recorded", sandbox.OutputLimit(req)); err != nil {
			return "", stopInfo{}, err
		}
	}

	var sum summary
	if a.cfg.OutputFormat == "" {
		sum.output = strings.TrimSpace(string(res.Stdout))
		sum.stop = agent.StopAnswered
		if err := r.emit(trajectory.Event{Kind: trajectory.KindMessage, Step: r.steps, DurationMS: time.Since(start).Milliseconds(),
			Message: &trajectory.Message{Role: trajectory.RoleAssistant, Content: sum.output}}); err != nil {
			return "", stopInfo{}, err
		}
	} else {
		p := &parser{emit: r.emitStep, base: r.steps, pricing: a.pricing, now: start,
			arrived: func(off int) time.Time { return arr.at(off, end) }}
		sum, err = parseFormat(a.cfg.OutputFormat, res.Stdout, p)
		if err != nil {
			return "", stopInfo{}, err
		}
		r.steps += sum.steps
		r.res.Usage = r.res.Usage.Add(sum.usage)
		r.res.CostUSD += sum.costUSD
		if sum.unreadable > 0 {
			if err := r.logf("%d line(s) of the agent's %s output were not readable and were skipped (first: %s)", sum.unreadable, a.cfg.OutputFormat, sum.firstUnreadable); err != nil {
				return "", stopInfo{}, err
			}
		}
	}

	stop := stopInfo{reason: sum.stop, detail: sum.stopDetail}
	switch {
	case res.TimedOut:
		stop = stopInfo{reason: agent.StopWallClock, detail: fmt.Sprintf("the agent command ran past its timeout of %s and was killed", a.timeout)}
	case res.ExitCode != 0:
		if err := r.logf("the agent command exited %d; stderr: %s", res.ExitCode, tail(res.Stderr, 2000)); err != nil {
			return "", stopInfo{}, err
		}
		if stop.reason == "" || stop.reason == agent.StopAnswered {
			stop = stopInfo{reason: StopExited, detail: fmt.Sprintf("exit code %d", res.ExitCode)}
		}
	case stop.reason == "":
		stop.reason = agent.StopAnswered
	}
	// The agent's provider or program failing is no outcome of the task:
	// an infrastructure error, retried like one. Its own stops (turn or
	// budget limits, an answer, a timeout) stay outcomes, also after a
	// provider error it got past.
	ownStop := sum.stop != "" && sum.stop != StopAgentError
	if failure := sum.failure; !res.TimedOut && (failure != "" || (res.ExitCode != 0 && sum.lastError != "" && !ownStop)) {
		if failure == "" {
			failure = sum.lastError
		}
		return "", stopInfo{}, fmt.Errorf("the agent's own run failed (exit code %d): %s", res.ExitCode, failure)
	}
	return a.redactString(sum.output), stop, nil
}

func (r *run) emit(e trajectory.Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.a.redactEvent(&e)
	if err := r.task.Emit.Emit(e); err != nil {
		return fmt.Errorf("recording %s event: %w", e.Kind, err)
	}
	return nil
}

// emitStep is the parsers' sink.
func (r *run) emitStep(e trajectory.Event) error { return r.emit(e) }

func (r *run) logf(format string, args ...any) error {
	return r.emit(trajectory.Event{Kind: trajectory.KindLog, Step: r.steps, Log: &trajectory.Log{Text: fmt.Sprintf(format, args...)}})
}

func (r *run) stop(s stopInfo) (agent.Result, error) {
	r.res.StopReason = s.reason
	r.res.Steps = r.steps
	if err := r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: s.reason, Detail: s.detail}}); err != nil {
		return r.res, err
	}
	return r.res, nil
}

// canceled ends the run because the caller canceled it.
func (r *run) canceled(err error) (agent.Result, error) {
	r.res.StopReason = agent.StopCanceled
	r.res.Steps = r.steps
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: agent.StopCanceled, Detail: err.Error()}})
	return r.res, fmt.Errorf("cli agent: %w", err)
}

// fail records an infrastructure error (best effort: the sink may be what
// failed) and returns it.
func (r *run) fail(err error) (agent.Result, error) {
	r.res.StopReason = agent.StopError
	r.res.Steps = r.steps
	msg := r.a.redactString(err.Error())
	_ = r.emit(trajectory.Event{Kind: trajectory.KindError, Step: r.steps, Error: &trajectory.Error{Kind: "agent", Message: msg}})
	_ = r.emit(trajectory.Event{Kind: trajectory.KindStop, Step: r.steps, Stop: &trajectory.Stop{Reason: agent.StopError, Detail: msg}})
	return r.res, fmt.Errorf("cli agent: %s", msg)
}

// shellQuote quotes s as one sh word: everything between single quotes is
// literal, and a single quote is written as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tail returns the last n bytes of b as text, for error messages.
func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

// FromSpec builds the agent of s.Target.Agent.CLI: the command's default
// timeout is harness.builtin.budget.wall_clock when set, and model calls
// are priced with harness.builtin.pricing over the default prices.
func FromSpec(s *spec.Spec, getenv func(string) string, logger *slog.Logger) (*Agent, error) {
	if s.Target.Agent == nil || s.Target.Agent.CLI == nil {
		return nil, errors.New("the spec has no target.agent.cli")
	}
	pricing := model.DefaultPricing()
	opts := []Option{}
	if logger != nil {
		opts = append(opts, WithLogger(logger))
	}
	if h := s.Harness; h != nil && h.Builtin != nil {
		pricing = pricing.Merge(h.Builtin.Pricing)
		if b := h.Builtin.Budget; b != nil {
			opts = append(opts, WithDefaultTimeout(b.WallClock.D()))
		}
	}
	opts = append(opts, WithPricing(pricing))
	return New(*s.Target.Agent.CLI, getenv, opts...)
}

// arrivals records when the pieces of a command's stdout arrived.
type arrivals struct {
	mu    sync.Mutex
	ends  []int // each piece's end offset in the stream
	times []time.Time
}

// maxArrivals bounds the pieces kept: an agent writing a byte at a time
// for a whole trial must not grow this without end. Pieces within a
// millisecond of the last, and all pieces past the bound, extend the last.
const maxArrivals = 1 << 16

func (a *arrivals) add(n int, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if k := len(a.ends); k > 0 && (k >= maxArrivals || t.Sub(a.times[k-1]) < time.Millisecond) {
		a.ends[k-1] += n
		return
	}
	end := n
	if k := len(a.ends); k > 0 {
		end += a.ends[k-1]
	}
	a.ends, a.times = append(a.ends, end), append(a.times, t)
}

func (a *arrivals) bytes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ends) == 0 {
		return 0
	}
	return a.ends[len(a.ends)-1]
}

// at is when the byte at offset off arrived; after is the time of bytes
// that were not streamed (a rung that streams less or nothing).
func (a *arrivals) at(off int, after time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearch(a.ends, off+1)
	if i < len(a.times) {
		return a.times[i]
	}
	return after
}

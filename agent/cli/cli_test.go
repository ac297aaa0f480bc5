package cli_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/agent"
	"evals.si/agent/cli"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

// The bwrap rung re-executes the test binary as its launcher (and, with an
// allowlist, as the in-sandbox proxy bridge).
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

type recorder struct{ events []trajectory.Event }

func (r *recorder) Emit(e trajectory.Event) error { r.events = append(r.events, e); return nil }

func (r *recorder) kinds(k trajectory.Kind) []trajectory.Event {
	var out []trajectory.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) text() string {
	var b strings.Builder
	for _, e := range r.events {
		switch {
		case e.Message != nil:
			b.WriteString(e.Message.Content + "\n")
		case e.Log != nil:
			b.WriteString(e.Log.Text + "\n")
		case e.Stop != nil:
			b.WriteString(e.Stop.Detail + "\n")
		case e.Error != nil:
			b.WriteString(e.Error.Message + "\n")
		}
	}
	return b.String()
}

func newAgent(t *testing.T, cfg spec.CLIAgent) *cli.Agent {
	t.Helper()
	a, err := cli.New(cfg, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func run(t *testing.T, a *cli.Agent, instruction string) (agent.Result, *recorder, agent.Sandbox) {
	t.Helper()
	sb := bwraptest.New(t, "/work/task")
	rec := &recorder{}
	res, err := a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: instruction, Sandbox: sb, Workdir: "/work/task", Emit: rec})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res, rec, sb
}

// nasty has quotes of both kinds, a command substitution, a variable,
// backslashes, a glob and newlines: it must reach the command verbatim.
const nasty = "fix 'this' and \"that\"; $(touch /work/task/pwned) `id` $HOME \\n \\\n*\nsecond line\n\n  trailing  "

func TestInstructionInCommandIsQuoted(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: `printf '%s' {instruction} > got.txt; printf 'done'`})
	res, _, sb := run(t, a, nasty)
	got, err := sb.ReadFile(t.Context(), "got.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != nasty {
		t.Errorf("the command got %q, want %q", got, nasty)
	}
	if _, err := sb.ReadFile(t.Context(), "pwned"); err == nil {
		t.Error("the instruction's $(...) ran")
	}
	if res.Output != "done" || res.StopReason != agent.StopAnswered || res.Steps != 0 {
		t.Errorf("result %+v", res)
	}
}

func TestInstructionOnStdin(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: `cat > got.txt && wc -c < got.txt`})
	res, rec, sb := run(t, a, nasty)
	got, err := sb.ReadFile(t.Context(), "got.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != nasty {
		t.Errorf("stdin was %q, want %q", got, nasty)
	}
	if strings.TrimSpace(res.Output) != strconv.Itoa(len(nasty)) {
		t.Errorf("output %q, want the byte count %d", res.Output, len(nasty))
	}
	// Without output_format, standard output is the answer: one user and
	// one assistant message, a stop, no steps.
	msgs := rec.kinds(trajectory.KindMessage)
	if len(msgs) != 2 || msgs[0].Message.Content != nasty || msgs[1].Message.Role != trajectory.RoleAssistant || len(rec.kinds(trajectory.KindModelCall)) != 0 {
		t.Errorf("events %+v", rec.events)
	}
}

// TestEnvFrom: the sandbox sees exactly the mapped variable, with the
// worker's value, and nothing else of the worker's environment; the value
// is redacted from what the agent records.
func TestEnvFrom(t *testing.T) {
	const secret = "sk-test-0123456789abcdef"
	t.Setenv("EVALSI_TEST_WORKER_KEY", secret)
	t.Setenv("SECRET_SHOULD_NOT_LEAK", "leaked-value-42")
	a := newAgent(t, spec.CLIAgent{Command: "env > env.txt; env", EnvFrom: map[string]string{"AGENT_API_KEY": "EVALSI_TEST_WORKER_KEY"}})
	res, rec, sb := run(t, a, "show the environment")
	raw, err := sb.ReadFile(t.Context(), "env.txt")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	if vars["AGENT_API_KEY"] != secret {
		t.Errorf("AGENT_API_KEY in the sandbox = %q, want the worker's value", vars["AGENT_API_KEY"])
	}
	// What the rung and sh set themselves; everything else came from the
	// worker and must not be there.
	own := []string{"AGENT_API_KEY", "HOME", "PATH", "PWD", "OLDPWD", "SHLVL", "_"}
	for k, v := range vars {
		if !slices.Contains(own, k) {
			t.Errorf("worker variable leaked into the sandbox: %s", k)
		}
		if v == "leaked-value-42" {
			t.Errorf("SECRET_SHOULD_NOT_LEAK's value is in the sandbox as %s", k)
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := vars[k]; ok && k != "HOME" && k != "PATH" && k != "PWD" && k != "OLDPWD" && k != "SHLVL" && k != "_" {
			t.Errorf("worker variable %s is in the sandbox", k)
		}
	}
	// The recorded answer shows the name but not the value.
	if !strings.Contains(res.Output, "AGENT_API_KEY=[redacted]") || strings.Contains(res.Output, secret) || strings.Contains(rec.text(), secret) {
		t.Errorf("output %q: the value is not redacted", res.Output)
	}
	if strings.Contains(res.Output, "SECRET_SHOULD_NOT_LEAK") {
		t.Errorf("output shows SECRET_SHOULD_NOT_LEAK: %q", res.Output)
	}
}

func TestEnvFromMissing(t *testing.T) {
	_, err := cli.New(spec.CLIAgent{Command: "true", EnvFrom: map[string]string{"ANTHROPIC_API_KEY": "EVALSI_TEST_SURELY_UNSET"}}, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") || !strings.Contains(err.Error(), "EVALSI_TEST_SURELY_UNSET") {
		t.Errorf("error %v, want one naming both variables", err)
	}
	for _, cfg := range []spec.CLIAgent{
		{Command: " "},
		{Command: "x", OutputFormat: "yaml"},
		{Command: "x", EnvFrom: map[string]string{"A=B": "C"}},
		{Command: "x", AllowHosts: []string{"example.com"}},
	} {
		if _, err := cli.New(cfg, os.Getenv); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestExitCodes: a non-zero exit is the agent's outcome (recorded, not an
// error); a command that cannot start is an error.
func TestExitCodes(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: "echo partial answer; echo boom >&2; exit 3"})
	res, rec, _ := run(t, a, "go")
	if res.StopReason != cli.StopExited || res.Output != "partial answer" {
		t.Errorf("result %+v", res)
	}
	if !strings.Contains(rec.text(), "exited 3; stderr: boom") {
		t.Errorf("no log of the exit: %s", rec.text())
	}

	a = newAgent(t, spec.CLIAgent{Command: "no-such-agent-binary --go"})
	sb := bwraptest.New(t, "/work/task")
	rec = &recorder{}
	_, err := a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: "go", Sandbox: sb, Workdir: "/work/task", Emit: rec})
	if err == nil || !strings.Contains(err.Error(), "could not start") {
		t.Errorf("err %v, want could not start", err)
	}
	if len(rec.kinds(trajectory.KindError)) != 1 {
		t.Errorf("events %+v", rec.events)
	}
}

func TestTimeout(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: "echo started; sleep 60", Timeout: spec.Duration(time.Second)})
	res, _, _ := run(t, a, "go")
	if res.StopReason != agent.StopWallClock {
		t.Errorf("stop %q, want wall_clock", res.StopReason)
	}
}

// conversation is a user simulator with fixed replies.
type conversation struct{ replies []string }

func (c *conversation) Reply(_ context.Context, msgs []trajectory.Message) (string, bool, error) {
	if len(c.replies) == 0 {
		return "", true, nil
	}
	r := c.replies[0]
	c.replies = c.replies[1:]
	return r, false, nil
}

// TestUserTurns: with a user simulator each user message runs the command
// again, in the same sandbox.
func TestUserTurns(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: `echo {instruction} >> turns.txt; wc -l < turns.txt`})
	sb := bwraptest.New(t, "/work/task")
	rec := &recorder{}
	res, err := a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: "one", Sandbox: sb, Workdir: "/work/task", Emit: rec,
		User: &conversation{replies: []string{"two", "three"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := sb.ReadFile(t.Context(), "turns.txt")
	if string(got) != "one\ntwo\nthree\n" || res.Output != "3" {
		t.Errorf("turns %q, output %q", got, res.Output)
	}
	if n := len(rec.kinds(trajectory.KindMessage)); n != 6 {
		t.Errorf("%d messages, want 6", n)
	}
}

func TestShapeEnvironment(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: "x", Install: []string{"pip install agent"}, AllowHosts: []string{"api.example.com:443", "pypi.org:443"}})
	base := &spec.Environment{Setup: spec.Steps("git init"), Sandbox: &spec.SandboxPolicy{Network: "deny", AllowHosts: []string{"pypi.org:443"}, Workdir: "/w"}}
	got := a.ShapeEnvironment(base)
	if !slices.Equal(got.Setup, spec.Steps("git init", "pip install agent")) {
		t.Errorf("setup %v", got.Setup)
	}
	if got.Sandbox.Network != "allowlist" || !slices.Equal(got.Sandbox.AllowHosts, []string{"pypi.org:443", "api.example.com:443"}) || got.Sandbox.Workdir != "/w" {
		t.Errorf("sandbox %+v", got.Sandbox)
	}
	// The shared environment is untouched.
	if len(base.Setup) != 1 || base.Sandbox.Network != "deny" || len(base.Sandbox.AllowHosts) != 1 {
		t.Errorf("base modified: %+v %+v", base, base.Sandbox)
	}
	// network: allow stays allow; no environment at all gets one.
	if got := a.ShapeEnvironment(&spec.Environment{Sandbox: &spec.SandboxPolicy{Network: "allow"}}); got.Sandbox.Network != "allow" {
		t.Errorf("allow became %q", got.Sandbox.Network)
	}
	if got := a.ShapeEnvironment(nil); got == nil || got.Sandbox.Network != "allowlist" {
		t.Errorf("nil env: %+v", got)
	}
	plain := newAgent(t, spec.CLIAgent{Command: "x"})
	if got := plain.ShapeEnvironment(base); got != base {
		t.Error("an agent with nothing to add copied the environment")
	}
}

// TestDefaultTimeout: cli.timeout, else the wall-clock budget, else 30m.
func TestDefaultTimeout(t *testing.T) {
	budget := &spec.Harness{Builtin: &spec.Builtin{Budget: &spec.Budget{WallClock: spec.Duration(5 * time.Minute)}}}
	for _, c := range []struct {
		timeout spec.Duration
		harness *spec.Harness
		want    time.Duration
	}{
		{0, nil, cli.DefaultTimeout},
		{0, budget, 5 * time.Minute},
		{spec.Duration(time.Minute), budget, time.Minute},
	} {
		s := &spec.Spec{Harness: c.harness, Target: spec.Target{Agent: &spec.Agent{CLI: &spec.CLIAgent{Command: "x", Timeout: c.timeout}}}}
		a, err := cli.FromSpec(s, os.Getenv, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Timeout() != c.want {
			t.Errorf("timeout %v with harness %v: got %v, want %v", c.timeout.D(), c.harness != nil, a.Timeout(), c.want)
		}
	}
}

// TestCanceled: a run the caller cancels ends with canceled and the
// context's error, not as the agent's outcome.
func TestCanceled(t *testing.T) {
	a := newAgent(t, spec.CLIAgent{Command: "touch started; sleep 60"})
	sb := bwraptest.New(t, "/work/task")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type outcome struct {
		res agent.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := a.Run(ctx, agent.Task{RecordID: "r1", Instruction: "go", Sandbox: sb, Workdir: "/work/task", Emit: &recorder{}})
		done <- outcome{res, err}
	}()
	for {
		if _, err := sb.ReadFile(t.Context(), "started"); err == nil {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("run ended before it was canceled: %+v %v", o.res, o.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	o := <-done
	if !errors.Is(o.err, context.Canceled) || o.res.StopReason != agent.StopCanceled {
		t.Errorf("result %+v, err %v", o.res, o.err)
	}
}

// The agent's output keeps what the run's caps.command_output_kb allows,
// and never less than the 16 MiB a parsed format needs.
func TestOutputLimit(t *testing.T) {
	sb := bwraptest.New(t, "/work/task")
	for _, tc := range []struct {
		name         string
		format       string
		limit, print int
		cutAt        int // 0: not cut
	}{
		{"the run's cap cuts plain output", "", 64 << 10, 100 << 10, 64 << 10},
		{"a format keeps 16 MiB over a smaller cap", cli.FormatDSH, 64 << 10, 100 << 10, 0},
		{"a format cuts at 16 MiB", cli.FormatDSH, 0, 17 << 20, 16 << 20},
		{"a larger cap wins over 16 MiB", cli.FormatDSH, 20 << 20, 17 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgent(t, spec.CLIAgent{Command: "head -c " + strconv.Itoa(tc.print) + ` /dev/zero | tr '\0' '\n'`, OutputFormat: tc.format})
			rec := &recorder{}
			// The output is blank lines, no answer: only the cap matters here.
			_, _ = a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: "go", Sandbox: sb, Workdir: "/work/task", Emit: rec, OutputLimit: tc.limit})
			cut := strings.Contains(rec.text(), "agent output cut at the")
			if want := "agent output cut at the " + strconv.Itoa(tc.cutAt) + "-byte output cap"; cut != (tc.cutAt > 0) || (cut && !strings.Contains(rec.text(), want)) {
				t.Errorf("cut %v, want %q:\n%.2000s", cut, want, rec.text())
			}
		})
	}
}

// TestProviderFailureIsAnError: a CLI agent whose provider fails (the
// recorded output of the real Claude Code and Codex against a provider
// answering 401 or 500, replayed by the command, which exits 1 as they do)
// returns an error, which the engine retries and reports as errored,
// instead of a result the checker would score 0. The agent's own stop (its
// turn limit) exiting 1 is still a result.
func TestProviderFailureIsAnError(t *testing.T) {
	for _, c := range []struct{ format, file string }{
		{cli.FormatClaude, "claude-provider-401.jsonl"},
		{cli.FormatClaude, "claude-provider-500.jsonl"},
		{cli.FormatCodex, "codex-provider-401.jsonl"},
		{cli.FormatCodex, "codex-provider-500.jsonl"},
	} {
		t.Run(c.file, func(t *testing.T) {
			out, err := os.ReadFile("testdata/" + c.file)
			if err != nil {
				t.Fatal(err)
			}
			a := newAgent(t, spec.CLIAgent{Command: "cat out.jsonl; exit 1", OutputFormat: c.format})
			sb := bwraptest.New(t, "/work/task")
			if err := sb.WriteFile(t.Context(), "/work/task/out.jsonl", out, 0o644); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			res, err := a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: "fix it", Sandbox: sb, Workdir: "/work/task", Emit: rec})
			if err == nil {
				t.Fatalf("Run returned a result (stop %q) for a failed provider; want an error", res.StopReason)
			}
			if res.StopReason != agent.StopError || len(rec.kinds(trajectory.KindError)) != 1 {
				t.Errorf("stop %q, %d error events; want %q and one", res.StopReason, len(rec.kinds(trajectory.KindError)), agent.StopError)
			}
		})
	}
	// Its own turn limit, after a provider error it got past, is a result.
	apiError := `{"type":"assistant","message":{"id":"m1","model":"<synthetic>","content":[{"type":"text","text":"API Error: 500 overloaded"}]},"is_api_error_message":true}`
	maxTurns := `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"session_id":"s"}`
	a := newAgent(t, spec.CLIAgent{Command: "echo '" + apiError + "'; echo '" + maxTurns + "'; exit 1", OutputFormat: cli.FormatClaude})
	res, _, _ := run(t, a, "fix it")
	if res.StopReason != agent.StopMaxSteps {
		t.Errorf("turn limit: stop %q, want %q", res.StopReason, agent.StopMaxSteps)
	}
}

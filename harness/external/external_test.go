package external_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"evals.si/agent"
	"evals.si/harness/builtinharness"
	"evals.si/harness/external"
	"evals.si/harness/harnesspb"
	"evals.si/harness/internal/probe"
	"evals.si/harness/server"
	"evals.si/internal/testenv"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
	"evals.si/trajectory"
)

func TestMain(m *testing.M) {
	reexec.Init()
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// builds holds the command-form harness binaries, built once per test
// binary: linking grpc twice per test is the slowest part of the suite.
var builds struct {
	once            sync.Once
	dir, probe, fix string
	err             error
}

func buildCommands(t *testing.T) (probeBin, fixBin string) {
	t.Helper()
	builds.once.Do(func() {
		builds.dir, builds.err = os.MkdirTemp("", "evalsi-harness-test-")
		if builds.err != nil {
			return
		}
		if builds.probe, builds.err = goBuild(builds.dir, "./testdata/probe"); builds.err != nil {
			return
		}
		builds.fix, builds.err = goBuild(builds.dir, "../examples/gofixcalc")
	})
	if builds.err != nil {
		t.Fatal(builds.err)
	}
	return builds.probe, builds.fix
}

// form makes the Options for one harness form; kind is "probe" (the
// conformance probe) or "fixcalc" (the form's fix-calc harness: the built-in
// harness for address, gofixcalc for command, the Python example for python).
type form struct {
	name string
	opts func(t *testing.T, kind string) external.Options
}

// serveInProcess serves h on 127.0.0.1 for the address form.
func serveInProcess(t *testing.T, h server.Harness) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	harnesspb.RegisterHarnessServer(gs, server.New(h))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// inProcessProbe serves the probe; its die-run mode kills the server, the
// in-process equivalent of a harness process dying mid-run.
func inProcessProbe(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	stopped := make(chan struct{})
	var once sync.Once
	h := &probe.Harness{Die: func() {
		once.Do(func() { go func() { gs.Stop(); close(stopped) }() })
		<-stopped
	}}
	harnesspb.RegisterHarnessServer(gs, server.New(h))
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func goBuild(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func requirePython(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf").Run(); err != nil {
		testenv.Missing(t, "python3-grpcio", "/usr/bin/python3 lacks grpc or protobuf (apt-get install python3-grpcio python3-protobuf)")
	}
}

func forms(t *testing.T) []form {
	t.Helper()
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return []form{
		{"address", func(t *testing.T, kind string) external.Options {
			if kind == "probe" {
				return external.Options{External: spec.External{Address: inProcessProbe(t)}}
			}
			return external.Options{External: spec.External{Address: serveInProcess(t, builtinharness.New(spec.Builtin{}, "test", nil))}}
		}},
		{"command", func(t *testing.T, kind string) external.Options {
			probeBin, fixBin := buildCommands(t)
			if kind == "probe" {
				return external.Options{External: spec.External{Command: []string{probeBin}}, Dir: testdata}
			}
			// A relative program path resolves against Dir.
			return external.Options{External: spec.External{Command: []string{"./" + filepath.Base(fixBin)}}, Dir: filepath.Dir(fixBin)}
		}},
		{"python", func(t *testing.T, kind string) external.Options {
			requirePython(t)
			if kind == "probe" {
				return external.Options{External: spec.External{Python: "probe_harness:ProbeHarness"}, Dir: testdata}
			}
			return external.Options{External: spec.External{Python: "evalsi_harness.examples.fixcalc:FixCalcHarness"}, Dir: testdata}
		}},
	}
}

// events collects a trial's events.
type events struct {
	mu    sync.Mutex
	evs   []trajectory.Event
	onLog func(text string)
}

func (e *events) Emit(ev trajectory.Event) error {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	if ev.Kind == trajectory.KindLog && e.onLog != nil {
		e.onLog(ev.Log.Text)
	}
	return nil
}

func (e *events) logs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		if ev.Kind == trajectory.KindLog {
			out = append(out, ev.Log.Text)
		}
	}
	return out
}

func (e *events) kinds() []trajectory.Kind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []trajectory.Kind
	for _, ev := range e.evs {
		out = append(out, ev.Kind)
	}
	return out
}

func scripted(t *testing.T, script *spec.Script) model.Connector {
	t.Helper()
	if script == nil {
		script = &spec.Script{Default: []spec.ScriptReply{{Content: "unused"}}}
	}
	c, err := model.New(spec.ModelRef{Connector: "scripted", Model: "scripted-agent", Script: script}, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newAgent(t *testing.T, o external.Options, conn model.Connector) *external.Agent {
	t.Helper()
	o.Connector, o.Model = conn, "scripted-agent"
	a, err := external.New(t.Context(), o)
	if err != nil {
		t.Fatalf("starting the harness: %v", err)
	}
	return a
}

// TestConformance runs the probe harness through every form: the protocol's
// order of calls, event streaming and validation, verdicts, and failures.
func TestConformance(t *testing.T) {
	cases := []struct {
		mode string
		// wantErr is a substring of Run's error; "" means success.
		wantErr string
		// wantCalls is what the probe's Teardown wrote; "" means Teardown
		// could not run (the harness died).
		wantCalls string
	}{
		{"ok", "", "setup,run,check,teardown"},
		{"fail-setup", "setup fails as asked", "setup,teardown"},
		{"fail-run", "run fails as asked", "setup,run,teardown"},
		{"die-run", "external harness: run", ""},
		{"bad-event", "may not stream checker events", "setup,run,teardown"},
		{"timeout", "", "setup,run,check,teardown"},
		{"hang", "context canceled", "setup,run,teardown"},
		{"fail-teardown", "teardown fails as asked", "setup,run,check,teardown"},
	}
	for _, f := range forms(t) {
		t.Run(f.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.mode, func(t *testing.T) {
					a := newAgent(t, f.opts(t, "probe"), scripted(t, nil))
					defer a.Close()
					name, version, proto, caps := a.Info()
					if name != "probe" || version != "1.0.0" || proto != harnesspb.ProtocolVersion || len(caps) != 1 || caps[0] != harnesspb.CapabilityCheck {
						t.Fatalf("Describe: name %q version %q protocol %q capabilities %v", name, version, proto, caps)
					}
					sb := bwraptest.New(t, "/workspace")
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					// The trial is canceled once the hanging harness says so.
					evs := &events{onLog: func(text string) {
						if text == "hanging" {
							cancel()
						}
					}}
					res, err := a.Run(ctx, agent.Task{RecordID: "r1", Instruction: c.mode + " please", Sandbox: sb, Workdir: "/workspace", Emit: evs})
					if c.wantErr == "" {
						if err != nil {
							t.Fatalf("Run: %v", err)
						}
						if c.mode == "ok" {
							checkOK(t, res, evs, f.name)
						} else {
							checkTimeout(t, evs)
						}
					} else {
						if err == nil || !strings.Contains(err.Error(), c.wantErr) {
							t.Fatalf("Run error = %v, want one containing %q", err, c.wantErr)
						}
						want := agent.StopError
						if c.mode == "hang" {
							want = agent.StopCanceled
						}
						if res.StopReason != want {
							t.Errorf("stop reason %q, want %q", res.StopReason, want)
						}
						if k := evs.kinds(); !slices.Contains(k, trajectory.KindError) || !slices.Contains(k, trajectory.KindStop) {
							t.Errorf("a failed trial should record error and stop events; got %v", k)
						}
					}
					calls, err := sb.ReadFile(context.Background(), "/workspace/"+probe.CallsFile)
					switch {
					case c.wantCalls == "" && !errors.Is(err, fs.ErrNotExist):
						t.Errorf("the harness died, yet its Teardown ran: %q, %v", calls, err)
					case c.wantCalls != "" && (err != nil || string(calls) != c.wantCalls):
						t.Errorf("calls seen by the harness = %q (%v), want %q", calls, err, c.wantCalls)
					}
				})
			}
		})
	}
}

func checkOK(t *testing.T, res agent.Result, evs *events, form string) {
	t.Helper()
	if res.Output != "probe done" || res.StopReason != agent.StopAnswered || res.Steps != 0 {
		t.Errorf("result %+v, want output %q, answered, 0 steps", res, "probe done")
	}
	if v := res.Verdict; v == nil || !v.Pass || v.Score != 0.75 || v.Details != "probe verdict" {
		t.Errorf("verdict %+v, want pass with score 0.75 from Check", v)
	}
	logs := evs.logs()
	want := []string{"external harness probe 1.0.0 (protocol 1, " + form + " form)", "probe event 1: probe"}
	for i := 2; i <= probe.EventCount; i++ {
		want = append(want, "probe event "+string(rune('0'+i)))
	}
	if strings.Join(logs, "|") != strings.Join(want, "|") {
		t.Errorf("log events in order:\n got %q\nwant %q", logs, want)
	}
	k := evs.kinds()
	if len(k) < 2 || k[len(k)-2] != trajectory.KindMessage || k[len(k)-1] != trajectory.KindStop {
		t.Errorf("the run should end with the harness's message and the worker's stop event; got %v", k)
	}
}

// checkTimeout: the sandbox's denial of the timed-out Worker.Exec is
// recorded by the worker as a policy event, before the harness's own log.
func checkTimeout(t *testing.T, evs *events) {
	t.Helper()
	evs.mu.Lock()
	defer evs.mu.Unlock()
	policy, logged := -1, -1
	for i, e := range evs.evs {
		switch {
		case e.Kind == trajectory.KindPolicy && e.Policy.Kind == "timeout":
			policy = i
		case e.Kind == trajectory.KindLog && e.Log.Text == "timed out: true":
			logged = i
		}
	}
	if policy < 0 || logged < 0 || policy > logged {
		t.Errorf("want a timeout policy event (at %d) before the harness's log (at %d); events %+v", policy, logged, evs.evs)
	}
}

// TestSecretsStayWithTheWorker: a harness the worker starts does not
// inherit provider keys from the worker's environment.
func TestSecretsStayWithTheWorker(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	for _, f := range forms(t) {
		if f.name == "address" {
			continue // in process: it shares the test's environment
		}
		t.Run(f.name, func(t *testing.T) {
			a := newAgent(t, f.opts(t, "probe"), scripted(t, nil))
			defer a.Close()
			evs := &events{}
			if _, err := a.Run(t.Context(), agent.Task{RecordID: "r1", Instruction: "env", Sandbox: bwraptest.New(t, "/workspace"), Workdir: "/workspace", Emit: evs}); err != nil {
				t.Fatal(err)
			}
			logs := evs.logs()
			if got := logs[len(logs)-1]; got != "OPENAI_API_KEY=" {
				t.Errorf("the harness saw %q", got)
			}
		})
	}
}

// TestFixCalc solves fix-calc with each form's harness: the built-in agent
// served over the protocol (address), the Go example (command) and the
// Python example (python), each through the worker's sandbox and model.
func TestFixCalc(t *testing.T) {
	f, err := spec.Load("../../examples/agents/fix-calc-external-go.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec := f.Spec.Dataset.Records[0]
	for _, fm := range forms(t) {
		t.Run(fm.name, func(t *testing.T) {
			a := newAgent(t, fm.opts(t, "fixcalc"), scripted(t, f.Spec.Target.Script))
			defer a.Close()
			sb := bwraptest.New(t, "/workspace")
			for name, content := range f.Spec.Environment.Files {
				if err := sb.WriteFile(t.Context(), name, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			evs := &events{}
			res, err := a.Run(t.Context(), agent.Task{RecordID: rec.ID, Instruction: rec.Input.Prompt(), Sandbox: sb,
				Workdir: "/workspace", Emit: evs})
			if err != nil {
				t.Fatalf("Run: %v\nevents: %v", err, evs.kinds())
			}
			script := f.Spec.Target.Script.Default
			if res.Output != script[len(script)-1].Content || res.StopReason != agent.StopAnswered || res.Steps != len(script) || res.Usage.Total() == 0 {
				t.Errorf("result %+v: want the script's last answer after %d metered model calls", res, len(script))
			}
			// The fix landed in the sandbox and the tests pass there.
			out, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"}, Workdir: "/workspace"})
			if err != nil || out.ExitCode != 0 {
				t.Errorf("tests after the harness's fix: exit %d, %v\n%s", out.ExitCode, err, out.Stdout)
			}
			_, _, _, caps := a.Info()
			if len(caps) > 0 {
				if v := res.Verdict; v == nil || !v.Pass || v.Score != 1 {
					t.Errorf("harness verdict %+v, want pass", v)
				}
			}
			count := map[trajectory.Kind]int{}
			for _, k := range evs.kinds() {
				count[k]++
			}
			if count[trajectory.KindModelCall] != len(script) || count[trajectory.KindToolCall] != 3 || count[trajectory.KindToolResult] != 3 || count[trajectory.KindStop] != 1 {
				t.Errorf("event counts %v: want %d model calls, 3 tool calls and results, one stop", count, len(script))
			}
		})
	}
}

// oracleProbe needs no sandbox: it checks that its trial has none, that the
// record's metadata and the oracle flag arrived, and that Chat fails in an
// oracle run, and passes only then.
type oracleProbe struct{}

func (oracleProbe) Describe(context.Context) (server.Info, error) {
	return server.Info{Name: "oracle-probe", Version: "1", Capabilities: []string{harnesspb.CapabilityCheck, harnesspb.CapabilityNoSandbox}}, nil
}
func (oracleProbe) Setup(context.Context, *server.Trial) error { return nil }
func (oracleProbe) Run(ctx context.Context, t *server.Trial, emit func(trajectory.Event) error) (server.Result, error) {
	var problems []string
	if _, err := t.Worker.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); status.Code(err) != codes.FailedPrecondition {
		problems = append(problems, fmt.Sprintf("exec without a sandbox: %v", err))
	}
	if string(t.Task.Metadata["answer"]) != `{"f":[1]}` || !t.Task.Oracle {
		problems = append(problems, fmt.Sprintf("metadata %s, oracle %v", t.Task.Metadata, t.Task.Oracle))
	}
	if _, err := t.Worker.Chat(ctx, model.Request{Messages: []trajectory.Message{{Role: "user", Content: "hi"}}}); status.Code(err) != codes.FailedPrecondition {
		problems = append(problems, fmt.Sprintf("chat in an oracle run: %v", err))
	}
	t.State = problems
	return server.Result{Output: strings.Join(problems, "; "), StopReason: agent.StopAnswered}, nil
}
func (oracleProbe) Check(_ context.Context, t *server.Trial) (*server.Verdict, error) {
	ok := len(t.State.([]string)) == 0
	return &server.Verdict{Pass: ok, Score: map[bool]float64{true: 1}[ok]}, nil
}
func (oracleProbe) Teardown(context.Context, *server.Trial) error { return nil }

// A no-sandbox harness in an oracle run: no sandbox, no model, the record's
// metadata in the task.
func TestNoSandboxOracle(t *testing.T) {
	addr := serveInProcess(t, oracleProbe{})
	a, err := external.New(t.Context(), external.Options{External: spec.External{Address: addr}, Oracle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.NeedsSandbox() {
		t.Fatal("NeedsSandbox = true for a harness advertising no-sandbox")
	}
	evs := &events{}
	res, err := a.Run(t.Context(), agent.Task{RecordID: "r", Emit: evs,
		Metadata: map[string]spec.JSON{"answer": spec.JSON(`{"f":[1]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict == nil || !res.Verdict.Pass {
		t.Fatalf("verdict %+v, output %q", res.Verdict, res.Output)
	}
}

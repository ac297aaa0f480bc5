package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"evals.si/embedded"
	"evals.si/engine"
	"evals.si/internal/testenv"
	"evals.si/modelserver"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

func requireTools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "bubblewrap is not installed")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "python3", "/usr/bin/python3 is not installed")
	}
}

type stored struct {
	sum    *engine.Summary
	trials []store.Trial
	events map[string][]trajectory.Event // by trial id
	scores map[string][]store.Score
}

// runSpec runs a spec in a fresh embedded app and returns what the store
// holds about it.
func runSpec(t *testing.T, path string, yaml []byte) stored {
	t.Helper()
	return runSpecLogged(t, path, yaml, nil)
}

// runSpecLogged is runSpec with the app's logs going to h as well.
func runSpecLogged(t *testing.T, path string, yaml []byte, h slog.Handler) stored {
	t.Helper()
	dir := t.TempDir()
	f, err := spec.Parse(path, yaml)
	if err != nil {
		t.Fatalf("spec: %v", err)
	}
	f.Dir = dir
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if h != nil {
		logger = slog.New(h)
	}
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	d, err := app.RunDetail(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	out := stored{sum: sum, trials: d.Trials, scores: d.Scores, events: map[string][]trajectory.Event{}}
	for _, tr := range d.Trials {
		if tr.Status != store.TrialFinished {
			t.Errorf("trial %s/%d: %s %s %s", tr.RecordID, tr.Trial, tr.Status, tr.ErrorKind, tr.Error)
		}
		evs, err := app.Store().Events(ctx, tr.ID, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		out.events[tr.ID] = evs
	}
	if sum.Errored != 0 {
		t.Fatalf("%d trial(s) errored: %v", sum.Errored, sum.ErrorsByKind)
	}
	return out
}

func count(evs []trajectory.Event, k trajectory.Kind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// TestExampleCLIOffline runs examples/agents/cli-offline.yaml: the fake
// Claude Code fixes fix-calc, its stream-json becomes the stored
// trajectory with steps and tokens, and the checker passes it.
func TestExampleCLIOffline(t *testing.T) {
	requireTools(t)
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git is not installed")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import pytest").Run(); err != nil {
		testenv.Missing(t, "python3-pytest", "python3 with pytest is not installed")
	}
	path := "../../examples/agents/cli-offline.yaml"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := runSpec(t, path, b)
	want := map[string]float64{"task-success": 1, "policy-clean": 1, "agent-steps": 4, "agent-tokens": 900 + 1400 + 1700 + 1800 + 40 + 180 + 30 + 35, "agent-cost-usd": 0.0321}
	for name, v := range want {
		if got, ok := s.sum.Scores[name]; !ok || got < v-1e-9 || got > v+1e-9 {
			// agent-tokens' input includes the prompt's length / 4.
			if !(name == "agent-tokens" && ok && got > v) {
				t.Errorf("score %s = %v (present %v), want %v; all %v", name, got, ok, v, s.sum.Scores)
			}
		}
	}
	tr := s.trials[0]
	evs := s.events[tr.ID]
	if n := count(evs, trajectory.KindModelCall); n != 4 {
		t.Errorf("%d model calls stored, want 4", n)
	}
	if n := count(evs, trajectory.KindToolCall); n != 3 || count(evs, trajectory.KindToolResult) != 3 {
		t.Errorf("%d tool calls, %d results stored, want 3 each", n, count(evs, trajectory.KindToolResult))
	}
	if !strings.HasPrefix(tr.Output, "Fixed add()") || tr.Usage.Total() == 0 || tr.CostUSD != 0.0321 {
		t.Errorf("trial output %q usage %+v cost %v", tr.Output, tr.Usage, tr.CostUSD)
	}
	var sawPytest bool
	for _, e := range evs {
		if e.Kind == trajectory.KindToolResult && strings.Contains(e.ToolResult.Output, "passed") {
			sawPytest = true
		}
	}
	if !sawPytest {
		t.Error("no tool result shows the tests passing")
	}
}

// serve starts a loopback HTTP server answering body.
func serve(t *testing.T, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestAllowHosts: the allowed loopback server answers through the egress
// proxy; the other is refused, which shows as a policy event in the stored
// trajectory and in policy-violations' scores. The environment says
// network: deny; the agent's allow_hosts still open its host.
func TestAllowHosts(t *testing.T) {
	requireTools(t)
	allowed, refused := serve(t, "hello from the allowed host"), serve(t, "should not be seen")
	// These test hosts are on the host's loopback: an allowed loopback host
	// leaves the sandbox's NO_PROXY empty, so the client goes through the
	// proxy for both, and the proxy refuses the second.
	script := `import sys, urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler())
for u in sys.argv[1:]:
    try:
        print(u, o.open(u, timeout=20).read().decode())
    except Exception as e:
        print(u, "failed:", e)
`
	yaml := fmt.Sprintf(`
name: cli-allow-hosts
dataset: {records: [{id: net, input: fetch}]}
target:
  agent:
    cli:
      command: "/usr/bin/python3 fetch.py http://%[1]s/ http://%[2]s/"
      allow_hosts: ["%[1]s"]
environment:
  files: {fetch.py: %[3]q}
  sandbox: {network: deny, ladder: [bwrap]}
evaluators: [policy-violations]
`, allowed, refused, script)
	s := runSpec(t, filepath.Join(t.TempDir(), "spec.yaml"), []byte(yaml))
	tr := s.trials[0]
	if !strings.Contains(tr.Output, "hello from the allowed host") {
		t.Errorf("the allowed host did not answer: %q", tr.Output)
	}
	if strings.Contains(tr.Output, "should not be seen") {
		t.Errorf("the refused host answered: %q", tr.Output)
	}
	var refusedEvent bool
	for _, e := range s.events[tr.ID] {
		if e.Kind == trajectory.KindPolicy && e.Policy.Kind == "network" && e.Policy.Host == refused {
			refusedEvent = true
		}
		if e.Kind == trajectory.KindPolicy && e.Policy.Host == allowed {
			t.Errorf("the allowed host has a policy event: %+v", e.Policy)
		}
	}
	if !refusedEvent {
		t.Errorf("no refused-host policy event for %s", refused)
	}
	if s.sum.Scores["policy-clean"] != 0 || s.sum.Scores["policy-events"] < 1 {
		t.Errorf("policy scores %v", s.sum.Scores)
	}
}

// TestInstallOnce: install runs once, during setup (setup_network deny,
// an offline command), and all three trials start from its result.
func TestInstallOnce(t *testing.T) {
	requireTools(t)
	yaml := `
name: cli-install
dataset: {records: [{id: once, input: count}]}
trials: 3
target:
  agent:
    cli:
      command: "cat .installed; echo trial >> .installed"
      install: ["echo installed >> .installed"]
environment:
  setup_network: deny
  sandbox: {ladder: [bwrap]}
evaluators: [policy-violations]
`
	setupLog := &testenv.LogCounter{}
	s := runSpecLogged(t, filepath.Join(t.TempDir(), "spec.yaml"), []byte(yaml), setupLog)
	if n := setupLog.Count("setup step"); n != 1 {
		t.Errorf("%d setup steps ran, want the one install command once", n)
	}
	if len(s.trials) != 3 {
		t.Fatalf("%d trials", len(s.trials))
	}
	for _, tr := range s.trials {
		// One "installed" line: install ran once, and no trial sees
		// another's writes.
		if tr.Output != "installed" {
			t.Errorf("trial %d saw %q, want exactly one install line", tr.Trial, tr.Output)
		}
	}
}

// TestSecretsNeverStored: a CLI agent writes its env_from secret into a
// file of the repository and prints it (its answer, over the inline limit,
// goes to a blob), and the checker prints the file. Afterwards no form of
// the secret is in any file of the store: the SQLite database with its WAL
// and the blob directory (the diff artifact, large outputs), while the
// diff, checker output and answer are there with the secret redacted.
func TestSecretsNeverStored(t *testing.T) {
	requireTools(t)
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "git is not installed")
	}
	secret := fmt.Sprintf("evalsi-test-secret-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Setenv("EVALSI_TEST_SECRET", secret)
	yaml := `
name: cli-secret
dataset: {records: [{id: leak, input: leak it}]}
target:
  agent:
    cli:
      command: 'echo "KEY=$AGENT_KEY" > leaked.txt; echo "my key is $AGENT_KEY"; head -c 70000 /dev/zero | tr "\0" x; echo; echo "again $AGENT_KEY"'
      env_from: {AGENT_KEY: EVALSI_TEST_SECRET}
environment:
  setup:
    - git init -q && git -c user.name=t -c user.email=t@localhost commit -q --allow-empty -m init
  env:
    GIT_CONFIG_COUNT: "1"
    GIT_CONFIG_KEY_0: safe.directory
    GIT_CONFIG_VALUE_0: "*"
  sandbox: {ladder: [bwrap]}
  checker:
    command: [sh, -c, 'cat leaked.txt; exit 1']
evaluators: [task-success]
`
	dir := t.TempDir()
	f, err := spec.Parse(filepath.Join(dir, "spec.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f.Dir = dir
	ctx := context.Background()
	db := filepath.Join(dir, "store", "evalsi.db")
	app, err := embedded.Open(ctx, embedded.Options{StorePath: db, StateDir: filepath.Join(dir, "state"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		app.Close()
		t.Fatal(err)
	}
	d, err := app.RunDetail(ctx, sum.RunID)
	if err != nil || len(d.Trials) != 1 || d.Trials[0].Status != store.TrialFinished {
		app.Close()
		t.Fatalf("run detail %+v, %v", d.Trials, err)
	}
	tr := d.Trials[0]
	arts, err := app.Store().Artifacts(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	var diff []byte
	for _, a := range arts {
		if a.Name == "diff.patch" {
			diff, err = app.Store().GetBlob(ctx, a.Digest)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(string(diff), "+KEY="+store.Redacted) {
		t.Errorf("stored diff does not show the redacted change:\n%s", diff)
	}
	if tr.OutputBlob == "" || !strings.Contains(tr.Output, "my key is "+store.Redacted) {
		t.Errorf("answer (blob %q) lacks the redacted key: %.100q", tr.OutputBlob, tr.Output)
	}
	evs, err := app.Store().Events(ctx, tr.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var checked bool
	for _, e := range evs {
		if e.Kind == trajectory.KindChecker && strings.Contains(e.Checker.Output, "KEY="+store.Redacted) {
			checked = true
		}
	}
	if !checked {
		t.Error("no checker event with the redacted key: the checker's output path was not exercised")
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}

	// Every file of the store, byte for byte.
	scanned := 0
	err = filepath.WalkDir(filepath.Dir(db), func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		scanned++
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 3 {
		t.Errorf("scanned %d files; want the database and blobs", scanned)
	}
}

// The offline Claude Code demo (examples/agents/claude-code-offline.yaml)
// with the real Claude Code from npm, run twice: both runs report the same
// tokens and cost, and the trial's totals are the sums of its model calls
// in the stored trajectory. Each call has its own time, a run's calls have
// durations, and every assistant row carries text or a tool call. A single
// call's duration may be 0, "unknown": the time from the line before it,
// and under load Claude Code's tool result and the scripted model's
// instant answer after it can reach us in one read.
func TestClaudeCodeOfflineTotalsRepeat(t *testing.T) {
	requireTools(t)
	npm := testenv.NodeModules(t, "@anthropic-ai/claude-code")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	script, err := modelserver.LoadScript("../../examples/agents/model-server/claude-code.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := modelserver.New(script, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := "../../examples/agents/claude-code-offline.yaml"
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("127.0.0.1:8089", addr.String(), "/usr/local/lib/evalsi/npm", npm).Replace(string(src))
	t.Setenv("AGENT_ANTHROPIC_KEY", "offline-dummy-key")

	type totals struct {
		usage trajectory.Usage
		cost  string
	}
	var runs []totals
	for run := range 2 {
		s := runSpec(t, path, []byte(y))
		tr := s.trials[0]
		var u trajectory.Usage
		var cost float64
		var calls, timed int
		times := map[time.Time]bool{}
		for _, e := range s.events[tr.ID] {
			switch e.Kind {
			case trajectory.KindModelCall:
				calls++
				u = u.Add(e.ModelCall.Usage)
				cost += e.ModelCall.CostUSD
				times[e.Time] = true
				if e.DurationMS > 0 {
					timed++
				}
				if e.DurationMS < 0 || e.ModelCall.CostUSD <= 0 || e.ModelCall.Usage.OutputTokens <= 1 {
					t.Errorf("run %d: model call at step %d: %d ms, %+v", run+1, e.Step, e.DurationMS, *e.ModelCall)
				}
			case trajectory.KindMessage:
				if m := e.Message; m.Role == trajectory.RoleAssistant && m.Content == "" && len(m.ToolCalls) == 0 {
					t.Errorf("run %d: an empty assistant message at step %d", run+1, e.Step)
				}
			}
		}
		if calls != 4 || len(times) != calls {
			t.Errorf("run %d: %d model calls at %d distinct times, want 4 at 4", run+1, calls, len(times))
		}
		if timed == 0 {
			t.Errorf("run %d: no model call has a duration", run+1)
		}
		if u != tr.Usage || fmt.Sprintf("%.6f", cost) != fmt.Sprintf("%.6f", tr.CostUSD) || tr.CostUSD <= 0 {
			t.Errorf("run %d: model calls add up to %+v $%.6f; the trial says %+v $%.6f", run+1, u, cost, tr.Usage, tr.CostUSD)
		}
		runs = append(runs, totals{tr.Usage, fmt.Sprintf("%.6f", tr.CostUSD)})
	}
	if runs[0] != runs[1] {
		t.Errorf("two runs of the demo differ: %+v and %+v", runs[0], runs[1])
	}
}

package a2a_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/embedded"
	"evals.si/internal/testenv"
	"evals.si/spec"
	"evals.si/trajectory"
)

// runExample runs examples/agents/<name> through embedded.App with from
// (the example's URL) replaced by to (the test peer's) and every edit
// applied, and returns the summary scores and the first trial's events.
func runExample(t *testing.T, name, from, to string, edits ...[2]string) (map[string]float64, []trajectory.Event) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "the task's checker runs in a bubblewrap sandbox")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "agents", name))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	if !strings.Contains(y, from) {
		t.Fatalf("%s does not contain %q", name, from)
	}
	y = strings.ReplaceAll(y, from, to)
	for _, e := range edits {
		if !strings.Contains(y, e[0]) {
			t.Fatalf("%s does not contain %q", name, e[0])
		}
		y = strings.ReplaceAll(y, e[0], e[1])
	}
	return runSpec(t, name, y)
}

// runSpec runs the spec y through a fresh embedded.App and returns the
// summary scores and the first trial's events.
func runSpec(t *testing.T, name, y string) (map[string]float64, []trajectory.Event) {
	t.Helper()
	dir := t.TempDir()
	f, err := spec.Parse(filepath.Join(dir, name), []byte(y))
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, y)
	}
	f.Dir = dir
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx := context.Background()
	app, err := embedded.Open(ctx, embedded.Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	sum, err := app.Run(ctx, f, embedded.RunOptions{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	d, err := app.RunDetail(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errored != 0 || len(d.Trials) == 0 {
		for _, tr := range d.Trials {
			t.Logf("trial %s: %s %s", tr.RecordID, tr.Status, tr.Error)
		}
		t.Fatalf("%d trial(s) errored: %v", sum.Errored, sum.ErrorsByKind)
	}
	evs, err := app.Store().Events(ctx, d.Trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sum.Scores, evs
}

// TestA2AExampleEndToEnd: examples/agents/a2a.yaml against an a2a-go
// agent (v1.0) and the JS SDK agent (v0.3 card): the answer is graded by
// includes and the task's environment is built and checked.
func TestA2AExampleEndToEnd(t *testing.T) {
	for _, p := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"a2a-go v1.0", func(t *testing.T) string { return startGoAgent(t, []string{"1.0"}, true).URL }},
		{"js v0.3", func(t *testing.T) string { return startJSAgent(t, "0.3") }},
	} {
		t.Run(p.name, func(t *testing.T) {
			scores, evs := runExample(t, "a2a.yaml", "http://127.0.0.1:9999", p.url(t))
			if scores["includes"] != 1 || scores["task-success"] != 1 {
				t.Errorf("scores = %v, want includes 1 and task-success 1", scores)
			}
			var checked bool
			for _, e := range evs {
				checked = checked || (e.Kind == trajectory.KindChecker && e.Checker.Pass)
			}
			if !checked {
				t.Errorf("no passing checker event in %d events", len(evs))
			}
		})
	}
}

// TestA2AUserSimulatorEndToEnd: with harness.builtin.user_simulator (a
// scripted judge playing the user), an A2A task that goes input-required
// is answered by the simulated user in the same task and completes.
func TestA2AUserSimulatorEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap", "the task's checker runs in a bubblewrap sandbox")
	}
	g := startGoAgent(t, []string{"1.0"}, true)
	scores, evs := runSpec(t, "a2a-usersim.yaml", `
name: a2a-usersim
dataset:
  records:
    - {id: temp, input: "Please clarify the temperature.", expected: "42 celsius"}
target: {agent: {a2a: {url: "`+g.URL+`"}}}
harness:
  builtin:
    user_simulator: {persona: a terse user, goal: learn the temperature in celsius, max_turns: 3}
judge:
  connector: scripted
  model: scripted-judge
  script: {default: [{content: celsius}, {content: "Thanks. [DONE]"}]}
environment:
  files: {notes.txt: "checked after the conversation\n"}
  sandbox: {network: deny}
  checker: {command: [sh, -c, "test -s notes.txt"]}
evaluators: [task-success, exact-match]
`)
	if scores["exact-match"] != 1 || scores["task-success"] != 1 {
		t.Errorf("scores = %v, want exact-match 1 and task-success 1", scores)
	}
	var users []string
	for _, e := range evs {
		if e.Kind == trajectory.KindMessage && e.Message.Role == trajectory.RoleUser {
			users = append(users, e.Message.Content)
		}
	}
	if got := strings.Join(users, "|"); got != "Please clarify the temperature.|celsius|Thanks." {
		t.Errorf("user messages = %q", got)
	}
}

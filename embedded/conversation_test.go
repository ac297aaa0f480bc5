package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"evals.si/agent/recording"
	"evals.si/agent/usersim"
	"evals.si/engine"
	"evals.si/spec"
	"evals.si/trajectory"
)

func trialEvents(t *testing.T, a *App, f *spec.File) (*engine.Summary, []trajectory.Event) {
	t.Helper()
	ctx := context.Background()
	sum, err := a.Run(ctx, f, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trials, err := a.Store().ListTrials(ctx, sum.RunID)
	if err != nil || len(trials) != 1 {
		t.Fatalf("trials %v, %v", trials, err)
	}
	if sum.Errored != 0 {
		t.Fatalf("trial errored: %s: %s", trials[0].ErrorKind, trials[0].Error)
	}
	events, err := a.Store().Events(ctx, trials[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sum, events
}

func TestUserSimulatorHoldsAConversation(t *testing.T) {
	requireAgentSandbox(t)
	f := loadSpec(t, "../examples/agents/user-simulator-offline.yaml")
	sum, events := trialEvents(t, openApp(t), f)
	if sum.Scores["task-success"] != 1 {
		t.Errorf("task-success %v: the conversation should have produced the file the user asked for", sum.Scores)
	}
	// The conversation as stored: each user message follows an answer.
	var dialog []string
	roles := map[string]int{}
	for _, e := range events {
		switch {
		case e.Kind == trajectory.KindMessage && e.Message.Role != trajectory.RoleSystem && e.Message.Content != "":
			dialog = append(dialog, e.Message.Role+": "+e.Message.Content)
		case e.Kind == trajectory.KindModelCall:
			roles[e.ModelCall.Role]++
			if e.ModelCall.Role == usersim.Role && e.ModelCall.Model != "scripted-user" {
				t.Errorf("user simulator model call on %q", e.ModelCall.Model)
			}
		case e.Kind == trajectory.KindStop && e.Stop.Reason != "answered":
			t.Errorf("stop %+v", e.Stop)
		}
	}
	want := []string{
		"user: Write a greeting to greeting.txt.",
		`assistant: I wrote "Hello" to greeting.txt.`,
		`user: Please make it say "Hello, world!" instead.`,
		`assistant: It now says "Hello, world!".`,
		"user: Also add a second line: Bye.",
		`assistant: Added "Bye." as a second line.`,
		"user: Perfect, thanks.",
	}
	if strings.Join(dialog, "\n") != strings.Join(want, "\n") {
		t.Errorf("conversation:\n%s\nwant:\n%s", strings.Join(dialog, "\n"), strings.Join(want, "\n"))
	}
	if roles["agent"] != 6 || roles[usersim.Role] != 3 {
		t.Errorf("model calls by role %v, want 6 agent and 3 %s", roles, usersim.Role)
	}
}

func TestUserSimulatorFallsBackToSpecJudge(t *testing.T) {
	requireAgentSandbox(t)
	data, err := os.ReadFile("../examples/agents/user-simulator-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The spec's judge plays the user when user_simulator has none.
	y := moveJudgeScript(t, string(data))
	p := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, _ := trialEvents(t, openApp(t), loadSpec(t, p))
	if sum.Scores["task-success"] != 1 {
		t.Errorf("with the spec's judge: %v", sum.Scores)
	}
}

// moveJudgeScript moves the example's user_simulator.judge to the spec's
// top level.
func moveJudgeScript(t *testing.T, y string) string {
	t.Helper()
	start := strings.Index(y, "      # Without judge here")
	end := strings.Index(y, "environment:")
	if start < 0 || end < start {
		t.Fatal("the example's layout changed")
	}
	block := y[start:end]
	var judge []string
	for _, l := range strings.Split(block, "\n")[2:] {
		if strings.TrimSpace(l) != "" {
			judge = append(judge, strings.TrimPrefix(l, "      "))
		}
	}
	return y[:start] + y[end:] + "judge:\n" + strings.Join(judge, "\n") + "\n"
}

// failingServer answers every request with HTTP 500 and counts them.
func failingServer(t *testing.T) (string, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, `{"error":{"message":"this server fails every call"}}`, http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &hits
}

// recordingSpec is a small fix-the-file task: the agent reads calc.txt,
// rewrites it and reads it again. target and files are filled in per test.
const recordingSpec = `name: recording-unit
dataset:
  records:
    - {id: "fix/calc 1", input: "calc.txt is wrong: fix it."}
target:
%s
harness:
  builtin:
    max_steps: 10
    recording: {%s}
environment:
  files: {calc.txt: %q}
  sandbox: {workdir: /workspace, network: deny}
  checker:
    command: [sh, -c, 'grep -qx "1 + 1 = 2" calc.txt']
evaluators: [task-success, policy-violations, agent-efficiency]
`

const recordedTarget = `  connector: scripted
  model: scripted-agent
  script:
    default:
      - content: rec-1
        tool_calls: [{name: bash, arguments: {command: cat calc.txt}}]
      - content: rec-2
        tool_calls: [{name: write_file, arguments: {path: calc.txt, content: "1 + 1 = 2\n"}}]
      - content: rec-3
        tool_calls: [{name: bash, arguments: {command: cat calc.txt}}]
      - content: rec-4 fixed`

// writeRecordingSpec writes a spec into dir (the recording's dir is
// relative to it).
func writeRecordingSpec(t *testing.T, dir, target, recording, calc string) *spec.File {
	t.Helper()
	p := filepath.Join(dir, "spec.yaml")
	y := fmt.Sprintf(recordingSpec, target, recording, calc)
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadSpec(t, p)
}

// step is what a trajectory says, without times and durations.
type step struct {
	Kind    trajectory.Kind
	Step    int
	Message *trajectory.Message
	Call    *trajectory.ToolCall
	Result  *trajectory.ToolResult
	Model   string
	Usage   trajectory.Usage
	Stop    *trajectory.Stop
	Checker bool
}

func steps(events []trajectory.Event) []step {
	var out []step
	for _, e := range events {
		if e.Kind == trajectory.KindLog && strings.HasPrefix(e.Log.Text, "replaying ") {
			continue
		}
		s := step{Kind: e.Kind, Step: e.Step, Message: e.Message, Call: e.ToolCall, Result: e.ToolResult, Stop: e.Stop}
		if e.ModelCall != nil {
			s.Model, s.Usage = e.ModelCall.Model, e.ModelCall.Usage
		}
		if e.Checker != nil {
			s.Checker = e.Checker.Pass
		}
		out = append(out, s)
	}
	return out
}

func assistantTexts(events []trajectory.Event) []string {
	var out []string
	for _, e := range events {
		if e.Kind == trajectory.KindMessage && e.Message.Role == trajectory.RoleAssistant {
			out = append(out, e.Message.Content)
		}
	}
	return out
}

func divergences(events []trajectory.Event) []trajectory.Divergence {
	var out []trajectory.Divergence
	for _, e := range events {
		if e.Kind == trajectory.KindDivergence {
			out = append(out, *e.Divergence)
		}
	}
	return out
}

// recordRun records the base task into dir/rec and returns its summary
// and events.
func recordRun(t *testing.T, dir string) (*engine.Summary, []trajectory.Event) {
	t.Helper()
	f := writeRecordingSpec(t, dir, recordedTarget, "mode: record, dir: rec", "1 + 1 = 3\n")
	sum, events := trialEvents(t, openApp(t), f)
	if sum.Scores["task-success"] != 1 {
		t.Fatalf("recorded run scores %v", sum.Scores)
	}
	return sum, events
}

// failingTarget is an OpenAI-compatible target whose every call fails.
func failingTarget(t *testing.T) (string, *atomic.Int64) {
	url, hits := failingServer(t)
	return fmt.Sprintf("  connector: openai\n  model: scripted-agent\n  base_url: %s/v1\n  api_key_env: EVALSI_TEST_FAKE_KEY\n  max_retries: 0", url), hits
}

func TestRecordThenReplayIsIdentical(t *testing.T) {
	requireAgentSandbox(t)
	t.Setenv("EVALSI_TEST_FAKE_KEY", "not-a-real-key")
	dir := t.TempDir()
	recSum, recEvents := recordRun(t, dir)

	// The recording is plain files.
	if _, err := recording.ReadManifest(filepath.Join(dir, "rec")); err != nil {
		t.Fatal(err)
	}
	lines, err := recording.ReadLines(recording.TrialPath(filepath.Join(dir, "rec"), "fix/calc 1", 0))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range lines {
		kinds = append(kinds, l.Type)
	}
	if got := strings.Join(kinds, ","); got != "model_call,tool,model_call,tool,model_call,tool,model_call" {
		t.Errorf("trial file lines: %s", got)
	}

	target, hits := failingTarget(t)
	f := writeRecordingSpec(t, dir, target, "mode: replay, dir: rec", "1 + 1 = 3\n")
	a := openApp(t)
	sum, events := trialEvents(t, a, f)
	if n := hits.Load(); n != 0 {
		t.Errorf("the live connector was called %d times in a pure replay", n)
	}
	if fmt.Sprint(sum.Scores) != fmt.Sprint(recSum.Scores) {
		t.Errorf("replay scores %v, recorded %v", sum.Scores, recSum.Scores)
	}
	got, want := steps(events), steps(recEvents)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed trajectory differs:\n%s\nrecorded:\n%s", dump(got), dump(want))
	}
	if d := divergences(events); len(d) > 0 {
		t.Errorf("divergences in an unchanged environment: %+v", d)
	}
}

func dump(ss []step) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "%s step %d", s.Kind, s.Step)
		if s.Message != nil {
			fmt.Fprintf(&b, " %s %q", s.Message.Role, s.Message.Content)
		}
		if s.Result != nil {
			fmt.Fprintf(&b, " %s %q", s.Result.Name, s.Result.Output)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestReplayFlagsAChangedEnvironment(t *testing.T) {
	requireAgentSandbox(t)
	t.Setenv("EVALSI_TEST_FAKE_KEY", "not-a-real-key")
	dir := t.TempDir()
	recordRun(t, dir)
	target, _ := failingTarget(t)
	f := writeRecordingSpec(t, dir, target, "mode: replay, dir: rec", "1 + 1 = 4\n")
	sum, events := trialEvents(t, openApp(t), f)
	d := divergences(events)
	if len(d) != 1 || d[0].Tool != "bash" || !strings.Contains(d[0].Recorded, "1 + 1 = 3") || !strings.Contains(d[0].Replayed, "1 + 1 = 4") || !strings.Contains(d[0].Summary, "output differs") {
		t.Fatalf("divergences %+v, want one for the first cat", d)
	}
	for _, e := range events {
		if e.Kind == trajectory.KindToolResult && e.Step == 1 && e.ToolResult.Divergence != d[0].Summary {
			t.Errorf("step 1 result not marked: %+v", e.ToolResult)
		}
		if e.Kind == trajectory.KindDivergence && e.Step != 1 {
			t.Errorf("divergence at step %d", e.Step)
		}
	}
	// The replayed agent still wrote the fix, so the checker passes.
	if sum.Scores["task-success"] != 1 {
		t.Errorf("scores %v", sum.Scores)
	}
}

func TestReplayBranchesToLiveAtStep(t *testing.T) {
	requireAgentSandbox(t)
	dir := t.TempDir()
	recordRun(t, dir)
	live := `  connector: scripted
  model: scripted-agent
  script:
    default:
      - content: live-1
        tool_calls: [{name: bash, arguments: {command: "echo live > calc.txt"}}]
      - content: live-2
        tool_calls: [{name: bash, arguments: {command: "echo live > calc.txt"}}]
      - content: live-3 done
      - content: live-4`
	f := writeRecordingSpec(t, dir, live, "mode: replay, dir: rec, branch_at_step: 2", "1 + 1 = 3\n")
	sum, events := trialEvents(t, openApp(t), f)
	if got := strings.Join(assistantTexts(events), ","); got != "rec-1,rec-2,live-3 done" {
		t.Errorf("assistant messages %s: want the first 2 from the recording and the 3rd live", got)
	}
	if d := divergences(events); len(d) > 0 {
		t.Errorf("divergences %+v", d)
	}
	if sum.Scores["task-success"] != 1 || sum.Scores["agent-steps"] != 3 {
		t.Errorf("scores %v", sum.Scores)
	}
}

func TestReplayNeedsARecording(t *testing.T) {
	dir := t.TempDir()
	f := writeRecordingSpec(t, dir, recordedTarget, "mode: replay, dir: nowhere", "x")
	_, err := openApp(t).Run(context.Background(), f, RunOptions{})
	var se SpecError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "spec.yaml:") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("replay of a missing recording: %v", err)
	}
}

func TestReplayServesTheUserSimulatorToo(t *testing.T) {
	requireAgentSandbox(t)
	data, err := os.ReadFile("../examples/agents/user-simulator-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(y, mode string) *spec.File {
		y = strings.Replace(y, "    max_steps: 10\n", "    max_steps: 10\n    recording: {mode: "+mode+", dir: rec}\n", 1)
		p := filepath.Join(dir, mode+".yaml")
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return loadSpec(t, p)
	}
	_, recEvents := trialEvents(t, openApp(t), write(string(data), "record"))

	// Every scripted reply of the agent and of the user now says Howdy:
	// a call answered live would show it.
	const checker = `printf "Hello, world!\nBye.\n"`
	live := strings.ReplaceAll(string(data), "Hello", "Howdy")
	live = strings.Replace(live, strings.ReplaceAll(checker, "Hello", "Howdy"), checker, 1)
	sum, events := trialEvents(t, openApp(t), write(live, "replay"))
	if sum.Scores["task-success"] != 1 {
		t.Errorf("replay scores %v", sum.Scores)
	}
	if got, want := steps(events), steps(recEvents); !reflect.DeepEqual(got, want) {
		t.Errorf("replayed conversation differs:\n%s\nrecorded:\n%s", dump(got), dump(want))
	}
}

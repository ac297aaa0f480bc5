package a2a_test

import (
	"strings"
	"testing"

	"evals.si/agent/remote/remotetest"
	"evals.si/trajectory"
)

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
			scores, evs := remotetest.Example(t, "a2a.yaml", "http://127.0.0.1:9999", p.url(t))
			if scores["includes"] != 1 || scores["task-success"] != 1 {
				t.Errorf("scores = %v, want includes 1 and task-success 1", scores)
			}
			if !remotetest.Checked(evs) {
				t.Errorf("no passing checker event in %d events", len(evs))
			}
		})
	}
}

// TestA2AUserSimulatorEndToEnd: with harness.builtin.user_simulator (a
// scripted judge playing the user), an A2A task that goes input-required
// is answered by the simulated user in the same task and completes.
func TestA2AUserSimulatorEndToEnd(t *testing.T) {
	g := startGoAgent(t, []string{"1.0"}, true)
	scores, evs := remotetest.Spec(t, "a2a-usersim.yaml", `
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

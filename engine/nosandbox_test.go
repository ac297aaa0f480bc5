package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"evals.si/agent"
	"evals.si/evaluate"
	"evals.si/spec"
	"evals.si/trajectory"
)

// noSandboxAgent checks it was given no sandbox and grades itself.
type noSandboxAgent struct{ pass bool }

func (a noSandboxAgent) Run(_ context.Context, t agent.Task) (agent.Result, error) {
	if t.Sandbox != nil || t.Harness != nil {
		return agent.Result{}, errors.New("got a sandbox")
	}
	if string(t.Metadata["category"]) != `"simple_python"` {
		return agent.Result{}, errors.New("the record's metadata did not reach the agent")
	}
	return agent.Result{Output: "[]", StopReason: agent.StopAnswered, Steps: 1,
		Verdict: &trajectory.Checker{Pass: a.pass, Score: map[bool]float64{true: 1}[a.pass], Details: `{"valid": false}`}}, nil
}

// A harness that needs no sandbox runs with none, no environment is
// prepared (Envs is nil here), and its own verdict grades the trial; a
// record asking for an environment is refused, not run unisolated.
func TestRunWithoutSandbox(t *testing.T) {
	ts, err := evaluate.New(spec.Evaluator{Name: evaluate.TaskSuccess}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, pass := range []bool{true, false} {
		r := &AgentRunner{Agent: noSandboxAgent{pass: pass}, NoSandbox: true, Evaluators: []evaluate.Evaluator{ts}}
		var events []trajectory.Event
		tc := &TrialContext{
			Record: spec.Record{ID: "simple_python_0", Input: spec.Input{Text: "q"}, Metadata: map[string]spec.JSON{"category": spec.JSON(`"simple_python"`)}},
			Emit:   trajectory.SinkFunc(func(e trajectory.Event) error { events = append(events, e); return nil }),
		}
		o, err := r.RunTrial(context.Background(), tc)
		if err != nil {
			t.Fatalf("pass=%v: %v", pass, err)
		}
		if o.Verdict == nil || o.Verdict.Pass != pass || len(o.Evaluations) != 1 {
			t.Fatalf("pass=%v: outcome %+v", pass, o)
		}
		if got := o.Evaluations[0].Scores[0]; got.Name != "task-success" || got.Value != map[bool]float64{true: 1}[pass] {
			t.Errorf("pass=%v: task-success %+v", pass, got)
		}
		if len(events) == 0 || events[0].Kind != trajectory.KindChecker {
			t.Errorf("pass=%v: events %+v, want the verdict's checker event", pass, events)
		}
	}
	r := &AgentRunner{Agent: noSandboxAgent{pass: true}, NoSandbox: true}
	env, _ := json.Marshal(map[string]any{"image": "debian"})
	_, err = r.RunTrial(context.Background(), &TrialContext{
		Record: spec.Record{ID: "x", Metadata: map[string]spec.JSON{"environment": env}},
		Emit:   trajectory.SinkFunc(func(trajectory.Event) error { return nil }),
	})
	var nr *NonRetryable
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "without a sandbox") {
		t.Errorf("a record with an environment: %v, want a non-retryable refusal", err)
	}
}

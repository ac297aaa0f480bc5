package evaluate

import (
	"context"
	"strings"
	"testing"

	"evals.si/spec"
	"evals.si/trajectory"
)

func TestTaskSuccess(t *testing.T) {
	tests := []struct {
		name    string
		verdict *trajectory.Checker
		want    map[string]float64
		wantErr string
	}{
		{"pass", &trajectory.Checker{Pass: true, Score: 1}, map[string]float64{"task-success": 1, "task-score": 1}, ""},
		{"fail with partial score", &trajectory.Checker{Pass: false, Score: 0.6, ExitCode: 1, Details: "3/5 tests"}, map[string]float64{"task-success": 0, "task-score": 0.6}, ""},
		{"no checker", nil, nil, `record "r": no checker verdict: task-success reads the environment's checker, so the environment needs a ` + "`checker`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, _ := New(spec.Evaluator{Name: TaskSuccess}, nil)
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "task", nil), Verdict: tt.verdict, Agent: true})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := scoreMap(scores); !equalScores(got, tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
			if scores[0].Name != "task-success" || scores[1].Name != "task-score" {
				t.Errorf("score order = %v", scores)
			}
		})
	}
}

func equalScores(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestPolicyViolations(t *testing.T) {
	policy := func(kind, host string) trajectory.Event {
		return trajectory.Event{Kind: trajectory.KindPolicy, Policy: &trajectory.Policy{Kind: kind, Host: host}}
	}
	escalation := func(granted bool) trajectory.Event {
		return trajectory.Event{Kind: trajectory.KindEscalation, Escalation: &trajectory.Escalation{Kind: "network", Granted: granted}}
	}
	tests := []struct {
		name   string
		events []trajectory.Event
		want   map[string]float64
	}{
		{"clean", nil, map[string]float64{"policy-clean": 1, "policy-events": 0, "escalation-requests": 0}},
		{"escalations alone stay clean", []trajectory.Event{escalation(false), escalation(true)}, map[string]float64{"policy-clean": 1, "policy-events": 0, "escalation-requests": 2}},
		{"refused hosts", []trajectory.Event{policy("network", "pypi.org"), policy("network", "github.com"), policy("oom", "")}, map[string]float64{"policy-clean": 0, "policy-events": 3, "escalation-requests": 0}},
		{"full trajectory", agentEvents(), map[string]float64{"policy-clean": 0, "policy-events": 1, "escalation-requests": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, _ := New(spec.Evaluator{Name: PolicyViolations}, nil)
			scores, err := ev.Evaluate(context.Background(), Trial{Record: record("r", "task", nil), Events: tt.events, Agent: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := scoreMap(scores); !equalScores(got, tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
		})
	}
	ev, _ := New(spec.Evaluator{Name: PolicyViolations}, nil)
	scores, _ := ev.Evaluate(context.Background(), Trial{Record: record("r", "task", nil), Events: agentEvents(), Agent: true})
	if d := string(scores[0].Details); !strings.Contains(d, `"host":"pypi.org"`) {
		t.Errorf("policy-clean details = %s", d)
	}
	if d := string(scores[2].Details); !strings.Contains(d, `"granted":false`) || !strings.Contains(d, `"detail":"need pip"`) {
		t.Errorf("escalation-requests details = %s", d)
	}
	if _, err := ev.Evaluate(context.Background(), Trial{Record: record("plain", "q", nil)}); err == nil || !strings.Contains(err.Error(), `record "plain": policy-violations scores agent runs`) {
		t.Errorf("plain trial error = %v", err)
	}
}

func TestAgentEfficiency(t *testing.T) {
	tests := []struct {
		name  string
		trial Trial
		want  map[string]float64
	}{
		{"from events", Trial{Events: agentEvents()},
			map[string]float64{"within-budget": 1, "agent-steps": 2, "agent-tokens": 2280, "agent-cost-usd": 0.03}},
		{"trial totals win", Trial{Events: agentEvents(), Usage: trajectory.Usage{InputTokens: 3000, OutputTokens: 100}, CostUSD: 0.05, StopReason: "answered"},
			map[string]float64{"within-budget": 1, "agent-steps": 2, "agent-tokens": 3100, "agent-cost-usd": 0.05}},
		{"steps from harness without events", Trial{Steps: 7, Usage: trajectory.Usage{InputTokens: 10}},
			map[string]float64{"within-budget": 1, "agent-steps": 7, "agent-tokens": 10, "agent-cost-usd": 0}},
		{"max_steps stop", Trial{Steps: 30, StopReason: "max_steps"},
			map[string]float64{"within-budget": 0, "agent-steps": 30, "agent-tokens": 0, "agent-cost-usd": 0}},
		{"budget stop", Trial{StopReason: "budget_usd"}, map[string]float64{"within-budget": 0, "agent-steps": 0, "agent-tokens": 0, "agent-cost-usd": 0}},
		{"wall clock stop from events", Trial{Events: []trajectory.Event{{Kind: trajectory.KindStop, Stop: &trajectory.Stop{Reason: "wall_clock"}}}},
			map[string]float64{"within-budget": 0, "agent-steps": 0, "agent-tokens": 0, "agent-cost-usd": 0}},
		{"overspent", Trial{StopReason: "answered", CostUSD: 2.5, Budget: &spec.Budget{USD: 2}},
			map[string]float64{"within-budget": 0, "agent-steps": 0, "agent-tokens": 0, "agent-cost-usd": 2.5}},
		{"over token budget", Trial{StopReason: "answered", Usage: trajectory.Usage{InputTokens: 900, OutputTokens: 200}, Budget: &spec.Budget{Tokens: 1000}},
			map[string]float64{"within-budget": 0, "agent-steps": 0, "agent-tokens": 1100, "agent-cost-usd": 0}},
		{"under budget", Trial{StopReason: "answered", CostUSD: 1, Usage: trajectory.Usage{InputTokens: 900}, Budget: &spec.Budget{USD: 2, Tokens: 1000}},
			map[string]float64{"within-budget": 1, "agent-steps": 0, "agent-tokens": 900, "agent-cost-usd": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, _ := New(spec.Evaluator{Name: AgentEfficiency}, nil)
			tt.trial.Record = record("r", "task", nil)
			tt.trial.Agent = true
			scores, err := ev.Evaluate(context.Background(), tt.trial)
			if err != nil {
				t.Fatal(err)
			}
			got := scoreMap(scores)
			if len(got) != len(tt.want) {
				t.Fatalf("scores = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if d := got[k] - v; d > 1e-12 || d < -1e-12 {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
	ev, _ := New(spec.Evaluator{Name: AgentEfficiency}, nil)
	scores, _ := ev.Evaluate(context.Background(), Trial{Record: record("r", "t", nil), StopReason: "max_steps", Agent: true})
	if d := string(scores[0].Details); !strings.Contains(d, `"reason":"stopped by max_steps"`) {
		t.Errorf("within-budget details = %s", d)
	}
	if _, err := ev.Evaluate(context.Background(), Trial{Record: record("plain", "q", nil)}); err == nil || !strings.Contains(err.Error(), "agent-efficiency scores agent runs") {
		t.Errorf("plain trial error = %v", err)
	}
}

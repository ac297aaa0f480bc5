package engine

import (
	"strings"
	"testing"
	"time"

	"evals.si/spec"
	"evals.si/trajectory"
)

func spent(record string, trial int, usd float64, tokens int) *Outcome {
	return &Outcome{RecordID: record, Trial: trial, Spend: Spend{CostUSD: usd, Usage: trajectory.Usage{InputTokens: tokens}}}
}

func TestBudgetStopsAtItsCaps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits RunBudget
		adds   []*Outcome
		want   string
	}{
		{"no limits", RunBudget{}, []*Outcome{spent("a", 0, 100, 1e6)}, ""},
		{"below usd", RunBudget{USD: 0.5}, []*Outcome{spent("a", 0, 0.2, 0), spent("b", 0, 0.2, 0)}, ""},
		{"usd reached", RunBudget{USD: 0.5}, []*Outcome{spent("a", 0, 0.2, 0), spent("b", 0, 0.3, 0)}, "budget $0.50 reached"},
		// 0.1 + 0.2 is 0.30000000000000004 and 0.3 a hair less: still reached.
		{"float sum equal to the cap", RunBudget{USD: 0.3}, []*Outcome{spent("a", 0, 0.1, 0), spent("b", 0, 0.2, 0)}, "budget $0.30 reached"},
		// A retried trial's later attempt counts its earlier ones: it
		// replaces them, it does not add to them.
		{"retries counted once", RunBudget{USD: 0.5}, []*Outcome{spent("a", 0, 0.2, 0), spent("a", 0, 0.4, 0)}, ""},
		{"trials of one record apart", RunBudget{USD: 0.5}, []*Outcome{spent("a", 0, 0.2, 0), spent("a", 1, 0.4, 0)}, "budget $0.50 reached"},
		{"tokens reached", RunBudget{Tokens: 1000}, []*Outcome{spent("a", 0, 0, 600), spent("b", 0, 0, 400)}, "budget 1000 tokens reached"},
		{"tokens below", RunBudget{Tokens: 1000}, []*Outcome{spent("a", 0, 0, 600), spent("a", 0, 0, 999)}, ""},
		{"odd cents", RunBudget{USD: 0.0042}, []*Outcome{spent("a", 0, 0.005, 0)}, "budget $0.0042 reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(tc.limits, time.Now())
			for _, o := range tc.adds {
				b.Add(o)
			}
			if got := b.Stopped(); got != tc.want {
				t.Errorf("Stopped() = %q, want %q (spent %+v)", got, tc.want, b.Spent())
			}
		})
	}
}

func TestBudgetWallClockAndStickiness(t *testing.T) {
	b := NewBudget(RunBudget{WallClock: time.Hour}, time.Now().Add(-2*time.Hour))
	if got := b.Stopped(); got != "wall_clock 1h0m0s reached" {
		t.Errorf("Stopped() = %q", got)
	}
	b = NewBudget(RunBudget{WallClock: time.Hour, USD: 1}, time.Now())
	if got := b.Stopped(); got != "" {
		t.Errorf("a fresh run: Stopped() = %q", got)
	}
	b.Add(spent("a", 0, 2, 0))
	if got := b.Stopped(); got != "budget $1.00 reached" {
		t.Errorf("Stopped() = %q", got)
	}
	b.Add(spent("a", 0, 0.5, 0)) // cannot happen (spend only grows); the stop holds anyway
	if got := b.Stopped(); got != "budget $1.00 reached" {
		t.Errorf("Stopped() = %q", got)
	}
	var none *Budget
	if none.Stopped() != "" {
		t.Error("a nil budget stops the run")
	}
}

func TestBudgetOfSpecAndOverrides(t *testing.T) {
	s := &spec.Spec{Budget: &spec.Budget{USD: 0.3, Tokens: 10, WallClock: spec.Duration(time.Minute)}}
	for _, tc := range []struct {
		name    string
		s       *spec.Spec
		usd     float64
		tokens  int
		want    RunBudget
		wantNil bool
	}{
		{"spec", s, 0, 0, RunBudget{USD: 0.3, Tokens: 10, WallClock: time.Minute}, false},
		{"--max-cost", s, 5, 0, RunBudget{USD: 5, Tokens: 10, WallClock: time.Minute}, false},
		{"tokens", s, 0, 99, RunBudget{USD: 0.3, Tokens: 99, WallClock: time.Minute}, false},
		{"no spec budget", &spec.Spec{}, 0, 0, RunBudget{}, true},
		{"--max-cost alone", &spec.Spec{}, 2, 0, RunBudget{USD: 2}, false},
	} {
		got := RunBudgetOf(tc.s, tc.usd, tc.tokens)
		if got != tc.want || got.IsZero() != tc.wantNil {
			t.Errorf("%s: %+v (zero %v), want %+v", tc.name, got, got.IsZero(), tc.want)
		}
	}
}

func TestBudgetLabel(t *testing.T) {
	for _, tc := range []struct {
		sum  Summary
		want string
	}{
		{Summary{Status: StatusInterrupted, Records: 3, Trials: 2, NotStarted: 4, Stopped: "budget $0.50 reached"}, "stopped: budget $0.50 reached, 4 trials not started"},
		{Summary{Status: StatusInterrupted, Records: 3, Trials: 2, NotStarted: 1, Stopped: "wall_clock 1h0m0s reached"}, "stopped: wall_clock 1h0m0s reached, 1 trial not started"},
		{Summary{Status: StatusCompleted, Records: 3, Trials: 2}, "completed"},
		{Summary{Status: StatusCompleted, Records: 3, Trials: 2, Errored: 6}, "completed with errors"},
	} {
		if got := tc.sum.Label(); got != tc.want {
			t.Errorf("%+v: label %q, want %q", tc.sum, got, tc.want)
		}
	}
}

func TestBudgetFormatUSD(t *testing.T) {
	for in, want := range map[float64]string{0.5: "$0.50", 12: "$12.00", 0.0042: "$0.0042", 0.12345: "$0.1235", 1234.567: "$1234.57", 0: "$0.00"} {
		if got := FormatUSD(in); got != want {
			t.Errorf("FormatUSD(%v) = %q, want %q", in, got, want)
		}
	}
}

func records(n int, input string) []spec.Record {
	out := make([]spec.Record, n)
	for i := range out {
		out[i] = spec.Record{ID: string(rune('a' + i)), Input: spec.Input{Text: input}}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// The estimate's numbers, worked out by hand from the constants it states.
func TestEstimateNumbers(t *testing.T) {
	forty := strings.Repeat("x", 40) // 10 tokens
	builtinSpec := func(b *spec.Budget, maxSteps int) *spec.Spec {
		return &spec.Spec{Trials: 3, Retries: ptr(0), Target: spec.Target{ModelRef: spec.ModelRef{Connector: "openai", Model: "house-model"}},
			Harness: &spec.Harness{Builtin: &spec.Builtin{MaxSteps: maxSteps, Budget: b, Pricing: map[string]spec.Price{"house-model": {Input: 1, Output: 2}}}}}
	}
	for _, tc := range []struct {
		name       string
		s          *spec.Spec
		recs       []spec.Record
		cap        RunBudget
		perTokens  int
		perUSD     float64
		usdKnown   bool
		capTrials  int
		basisHas   string
		assumedHas string
	}{
		{
			// One call: 10 tokens in, max_tokens 100 out, on gpt-4o-mini
			// ($0.15 / $0.60): 10×0.15e-6 + 100×0.60e-6.
			name: "plain", s: &spec.Spec{Trials: 2, Target: spec.Target{ModelRef: spec.ModelRef{Connector: "openai", Model: "gpt-4o-mini", MaxTokens: 100}}},
			recs: records(4, forty), perTokens: 110, perUSD: 10*0.15e-6 + 100*0.60e-6, usdKnown: true,
			basisHas: "target.max_tokens 100", assumedHas: "2 retries",
		},
		{
			// 10 steps: input 10×(2000+10) + 600×(0+1+…+9) = 20,100 + 27,000
			// = 47,100; output 10×300 = 3,000. At $1 / $2 per million:
			// 0.0471 + 0.006 = $0.0531.
			name: "builtin steps", s: builtinSpec(nil, 10), recs: records(2, forty),
			perTokens: 50_100, perUSD: 0.0531, usdKnown: true, basisHas: "10 steps (harness.builtin.max_steps)",
			assumedHas: "uses all 10 steps",
		},
		{
			// budget.usd $0.05 bounds it below $0.0531; the run's $0.12
			// cap is reached during the third trial of six.
			name: "builtin budget.usd", s: builtinSpec(&spec.Budget{USD: 0.05}, 10), recs: records(2, forty), cap: RunBudget{USD: 0.12},
			perTokens: 47_175, perUSD: 0.05, usdKnown: true, capTrials: 3, basisHas: "harness.builtin.budget.usd $0.05",
		},
		{
			// budget.tokens 10,020 is a fifth of 50,100: $0.0531 / 5.
			name: "builtin budget.tokens", s: builtinSpec(&spec.Budget{Tokens: 10_020}, 10), recs: records(2, forty),
			perTokens: 10_020, perUSD: 0.01062, usdKnown: true, basisHas: "harness.builtin.budget.tokens 10,020",
		},
		{
			name: "unpriced model", s: &spec.Spec{Target: spec.Target{ModelRef: spec.ModelRef{Connector: "openai", Model: "mystery"}}},
			recs: records(1, forty), perTokens: 510, usdKnown: false, basisHas: "one model call",
			assumedHas: `model "mystery" has no price: add harness.builtin.pricing`,
		},
		{
			name: "remote agent", s: &spec.Spec{Target: spec.Target{Agent: &spec.Agent{A2A: &spec.A2AAgent{URL: "http://127.0.0.1:1"}}}},
			recs: records(1, forty), usdKnown: false, basisHas: "the agent's own model calls", assumedHas: "set harness.builtin.budget (CLI agents) or the run's budget.usd",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := EstimateRun(tc.s, "est", tc.recs, tc.cap)
			if e.PerTrialTokens != tc.perTokens || !near(e.PerTrialUSD, tc.perUSD) || e.USDKnown != tc.usdKnown || e.CapTrials != tc.capTrials {
				t.Errorf("per trial %d tokens, $%v (known %v), cap trials %d; want %d, $%v (%v), %d",
					e.PerTrialTokens, e.PerTrialUSD, e.USDKnown, e.CapTrials, tc.perTokens, tc.perUSD, tc.usdKnown, tc.capTrials)
			}
			trials := len(tc.recs) * max(tc.s.Trials, 1)
			if e.Trials != trials || e.Tokens != tc.perTokens*trials || !near(e.USD, tc.perUSD*float64(trials)) {
				t.Errorf("run: %d trials, %d tokens, $%v; want %d, %d, $%v", e.Trials, e.Tokens, e.USD, trials, tc.perTokens*trials, tc.perUSD*float64(trials))
			}
			if !strings.Contains(e.Basis, tc.basisHas) || !strings.Contains(strings.Join(e.Assumptions, "\n"), tc.assumedHas) {
				t.Errorf("basis %q, assumptions %q; want %q and %q", e.Basis, e.Assumptions, tc.basisHas, tc.assumedHas)
			}
		})
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

// What a person reads: the per-trial and run lines, the cap, the
// assumptions.
func TestEstimateWrite(t *testing.T) {
	s := &spec.Spec{Trials: 3, Retries: ptr(1), Concurrency: 2, Target: spec.Target{ModelRef: spec.ModelRef{Connector: "openai", Model: "house-model"}},
		Harness: &spec.Harness{Builtin: &spec.Builtin{MaxSteps: 10, Budget: &spec.Budget{USD: 0.05},
			Pricing: map[string]spec.Price{"house-model": {Input: 1, Output: 2}}}}}
	var b strings.Builder
	if err := EstimateRun(s, "fix-calc", records(2, strings.Repeat("x", 40)), RunBudget{USD: 0.12}).Write(&b); err != nil {
		t.Fatal(err)
	}
	want := `Estimate for fix-calc: 2 records × 3 = 6 trials
  model      house-model, $1.00 / $2.00 per million input / output tokens
  per trial  up to $0.05, 47,175 tokens   (harness.builtin.budget.usd $0.05)
  run        up to $0.30, 283,050 tokens  (6 trials)
  cap        $0.12                        (stops the run after about 3 of 6 trials start; the rest wait for a resume)
                                          (with 2 trials at once, those running when the cap is reached finish: up to 4 trials, up to $0.20)
Assumed:
  - a record's input is 10 tokens on average (4 characters a token)
  - a trial uses all 10 steps; a step sends 2,000 tokens of system prompt and tools, the record and 600 tokens per earlier step, and gets 300 back
  - a trial stops at its budget; the model call that crosses it is not cut short, so one call more may be spent
  - no attempt errors: the retry of an errored trial can spend as much again
`
	if b.String() != want {
		t.Errorf("estimate:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestBudgetResumeHint(t *testing.T) {
	for reason, want := range map[string]string{
		"budget $0.50 reached":       "resume with a higher cap: evalsi runs resume R --max-cost USD",
		"budget 1000 tokens reached": "resume with a higher cap: evalsi runs resume R --max-tokens N",
		"wall_clock 1h0m0s reached":  "resume to run them: evalsi runs resume R",
	} {
		if got := ResumeHint(reason, "R"); got != want {
			t.Errorf("ResumeHint(%q) = %q, want %q", reason, got, want)
		}
	}
}

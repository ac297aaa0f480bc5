package engine

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"evals.si/agent/builtin"
	"evals.si/model"
	"evals.si/spec"
)

// What an estimate assumes where the spec does not say. They are stated in
// every estimate (Estimate.Assumptions), so a person can judge them.
const (
	// charsPerToken turns a record's text into tokens.
	charsPerToken = 4
	// plainOutputTokens is a plain eval's answer when target.max_tokens
	// does not bound it.
	plainOutputTokens = 500
	// stepBaseTokens is what every built-in agent step sends besides the
	// record and the earlier steps: the system prompt and tool schemas.
	stepBaseTokens = 2000
	// stepGrowthTokens is what each earlier step adds to a step's input:
	// the model's turn and the tool's result.
	stepGrowthTokens = 600
	// stepOutputTokens is one step's model output.
	stepOutputTokens = 300
)

// Estimate is what a run may spend, worked out before it starts from the
// spec (its pricing, the harness's per-trial budgets and max_steps, the
// run's cap) and its dataset, with what it assumed. Write prints it for
// people; its JSON is for machines.
type Estimate struct {
	Name            string `json:"name"`
	Records         int    `json:"records"`
	TrialsPerRecord int    `json:"trials_per_record"`
	// Trials is records × trials per record.
	Trials int `json:"trials"`
	// Model is the priced model (the target's); Price its price, nil when
	// none is known.
	Model string      `json:"model,omitempty"`
	Price *spec.Price `json:"price,omitempty"`
	// PerTrialTokens and PerTrialUSD are what one trial may spend; Known
	// says whether the spec lets them be estimated at all (a remote agent's
	// spend is its own). Basis says what bounds them.
	PerTrialTokens int     `json:"per_trial_tokens"`
	PerTrialUSD    float64 `json:"per_trial_usd"`
	TokensKnown    bool    `json:"tokens_known"`
	USDKnown       bool    `json:"usd_known"`
	Basis          string  `json:"basis"`
	// Tokens and USD are the whole run's: per trial × trials, before the
	// run's cap and without retries.
	Tokens int     `json:"tokens"`
	USD    float64 `json:"usd"`
	// Retries is how often an errored attempt runs again; each may spend
	// as much as the trial again.
	Retries int `json:"retries"`
	// Cap is the run's budget (spec budget, --max-cost); CapTrials, when
	// the cap stops the run early, is about how many trials start.
	CapUSD       float64 `json:"cap_usd,omitempty"`
	CapTokens    int     `json:"cap_tokens,omitempty"`
	CapWallClock string  `json:"cap_wall_clock,omitempty"`
	CapTrials    int     `json:"cap_trials,omitempty"`
	// Concurrency is how many trials run at once. The cap is checked as
	// trials finish, so when it is reached up to Concurrency-1 others are
	// still running and finish: CapTrialsWorst and CapUSDWorst are what
	// the run may then start and spend.
	Concurrency    int      `json:"concurrency"`
	CapTrialsWorst int      `json:"cap_trials_worst,omitempty"`
	CapUSDWorst    float64  `json:"cap_usd_worst,omitempty"`
	Assumptions    []string `json:"assumptions"`
}

// EstimateRun estimates a run of s over records (loaded as the run would
// load them), under the run budget b (RunBudgetOf: the spec's with
// --max-cost).
func EstimateRun(s *spec.Spec, name string, records []spec.Record, b RunBudget) *Estimate {
	l := LimitsOf(s)
	e := &Estimate{Name: name, Records: len(records), TrialsPerRecord: l.Trials, Trials: len(records) * l.Trials,
		Retries: l.Retries, CapUSD: b.USD, CapTokens: b.Tokens, Concurrency: l.Concurrency}
	if b.WallClock > 0 {
		e.CapWallClock = b.WallClock.String()
	}
	in := avgInputTokens(records)
	e.assume("a record's input is %s tokens on average (%d characters a token)", thousands(in), charsPerToken)
	switch {
	case !s.IsAgentRun():
		e.plain(s, in)
	case s.Target.Agent != nil:
		e.ownAgent(s)
	case s.Harness != nil && s.Harness.External != nil:
		e.Basis = "harness.external: the harness's own model calls"
		e.assume("the external harness's spend is its own: the spec bounds no trial's spend, only the run's cap does")
	default:
		e.builtin(s, in)
	}
	if e.TokensKnown {
		e.Tokens = e.PerTrialTokens * e.Trials
	}
	if e.USDKnown {
		e.USD = e.PerTrialUSD * float64(e.Trials)
	}
	e.capTrials()
	switch {
	case l.Retries == 1:
		e.assume("no attempt errors: the retry of an errored trial can spend as much again")
	case l.Retries > 1:
		e.assume("no attempt errors: each of up to %d retries of an errored trial can spend as much again", l.Retries)
	}
	if s.Judge != nil || judged(s) {
		e.assume("judge calls (llm-judge, code-quality, goal-completion, a user simulator) are not counted")
	}
	return e
}

// plain: one model call per trial.
func (e *Estimate) plain(s *spec.Spec, in int) {
	e.price(s.Target.Model, model.DefaultPricing())
	out := plainOutputTokens
	if s.Target.MaxTokens > 0 {
		out = s.Target.MaxTokens
		e.Basis = fmt.Sprintf("one model call a trial, its answer up to target.max_tokens %d", out)
	} else {
		e.Basis = "one model call a trial"
		e.assume("an answer is %d tokens (set target.max_tokens to bound it)", out)
	}
	e.spend(in, out)
}

// builtin: the built-in agent's steps, bounded by harness.builtin's
// budget and max_steps.
func (e *Estimate) builtin(s *spec.Spec, in int) {
	var cfg spec.Builtin
	if s.Harness != nil && s.Harness.Builtin != nil {
		cfg = *s.Harness.Builtin
	}
	e.price(s.Target.Model, model.DefaultPricing().Merge(cfg.Pricing))
	steps, from := cfg.MaxSteps, "harness.builtin.max_steps"
	if steps <= 0 {
		steps, from = builtin.DefaultMaxSteps, "the default max_steps"
	}
	// Every step sends the context so far: step k (from 0) carries k
	// earlier steps.
	stepsIn := steps*(stepBaseTokens+in) + stepGrowthTokens*steps*(steps-1)/2
	stepsOut := steps * stepOutputTokens
	e.assume("a trial uses all %d steps; a step sends %s tokens of system prompt and tools, the record and %d tokens per earlier step, and gets %d back",
		steps, thousands(stepBaseTokens), stepGrowthTokens, stepOutputTokens)
	e.Basis = fmt.Sprintf("%d steps (%s)", steps, from)
	e.spend(stepsIn, stepsOut)
	var bu spec.Budget
	if cfg.Budget != nil {
		bu = *cfg.Budget
	}
	if bu.Tokens > 0 && bu.Tokens < e.PerTrialTokens {
		// Scale both to the cap, keeping the steps' input/output mix.
		f := float64(bu.Tokens) / float64(e.PerTrialTokens)
		e.PerTrialTokens, e.PerTrialUSD = bu.Tokens, e.PerTrialUSD*f
		e.Basis = fmt.Sprintf("harness.builtin.budget.tokens %s", thousands(bu.Tokens))
	}
	if bu.USD > 0 && (!e.USDKnown || bu.USD < e.PerTrialUSD) {
		if e.USDKnown && e.PerTrialUSD > 0 {
			e.PerTrialTokens = int(math.Round(float64(e.PerTrialTokens) * bu.USD / e.PerTrialUSD))
		}
		e.PerTrialUSD, e.USDKnown = bu.USD, true
		e.Basis = "harness.builtin.budget.usd " + FormatUSD(bu.USD)
	}
	if bu.USD > 0 || bu.Tokens > 0 {
		e.assume("a trial stops at its budget; the model call that crosses it is not cut short, so one call more may be spent")
	}
}

// ownAgent: target.agent. The CLI agent is bounded by harness.builtin's
// budget; the others' spend is theirs.
func (e *Estimate) ownAgent(s *spec.Spec) {
	a := s.Target.Agent
	switch {
	case a.Oracle != nil:
		e.Basis = "target.agent.oracle: no model calls"
		e.TokensKnown, e.USDKnown = true, true
		return
	case a.CLI != nil && s.Harness != nil && s.Harness.Builtin != nil && s.Harness.Builtin.Budget != nil:
		bu := s.Harness.Builtin.Budget
		if bu.USD > 0 {
			e.PerTrialUSD, e.USDKnown = bu.USD, true
			e.Basis = "harness.builtin.budget.usd " + FormatUSD(bu.USD) + " (the CLI agent is stopped there)"
		}
		if bu.Tokens > 0 {
			e.PerTrialTokens, e.TokensKnown = bu.Tokens, true
			if e.Basis == "" {
				e.Basis = fmt.Sprintf("harness.builtin.budget.tokens %s (the CLI agent is stopped there)", thousands(bu.Tokens))
			}
		}
		if e.Basis != "" {
			return
		}
	}
	e.Basis = "target.agent: the agent's own model calls"
	e.assume("the agent's spend is its own: set harness.builtin.budget (CLI agents) or the run's budget.usd to bound it")
}

// price looks up the target model's price.
func (e *Estimate) price(name string, p model.Pricing) {
	e.Model = name
	if name == "" {
		name = model.ScriptedModel
	}
	if pr, ok := p.Lookup(name); ok {
		e.Price = &pr
		return
	}
	e.assume("model %q has no price: add harness.builtin.pricing: {%s: {input: USD, output: USD}} (per million tokens)", name, name)
}

// spend sets the per-trial spend from tokens in and out.
func (e *Estimate) spend(in, out int) {
	e.PerTrialTokens, e.TokensKnown = in+out, true
	if e.Price != nil {
		e.PerTrialUSD = (float64(in)*e.Price.Input + float64(out)*e.Price.Output) / 1e6
		e.USDKnown = true
	}
}

// capTrials works out how many trials start before the run's cap stops it.
func (e *Estimate) capTrials() {
	n := e.Trials
	if e.CapUSD > 0 && e.USDKnown && e.PerTrialUSD > 0 {
		n = min(n, int(math.Ceil(e.CapUSD/e.PerTrialUSD-1e-9)))
	}
	if e.CapTokens > 0 && e.TokensKnown && e.PerTrialTokens > 0 {
		n = min(n, int(math.Ceil(float64(e.CapTokens)/float64(e.PerTrialTokens)-1e-9)))
	}
	if n < e.Trials {
		e.CapTrials = n
		e.CapTrialsWorst = min(e.Trials, n+max(e.Concurrency, 1)-1)
		if e.USDKnown {
			e.CapUSDWorst = float64(e.CapTrialsWorst) * e.PerTrialUSD
		}
	}
}

func (e *Estimate) assume(format string, args ...any) {
	e.Assumptions = append(e.Assumptions, fmt.Sprintf(format, args...))
}

// Write prints the estimate for people.
func (e *Estimate) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Estimate for %s: %s × %d = %s\n", e.Name, plural(e.Records, "record"), e.TrialsPerRecord, plural(e.Trials, "trial"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if e.Model != "" || e.Price != nil {
		price := "no price known"
		if e.Price != nil {
			price = fmt.Sprintf("%s / %s per million input / output tokens", FormatUSD(e.Price.Input), FormatUSD(e.Price.Output))
		}
		fmt.Fprintf(tw, "  model\t%s, %s\n", orDefault(e.Model, model.ScriptedModel), price)
	}
	fmt.Fprintf(tw, "  per trial\tup to %s, %s tokens\t(%s)\n", e.usd(e.PerTrialUSD), e.tokens(e.PerTrialTokens), e.Basis)
	fmt.Fprintf(tw, "  run\tup to %s, %s tokens\t(%s)\n", e.usd(e.USD), e.tokens(e.Tokens), plural(e.Trials, "trial"))
	var caps []string
	if e.CapUSD > 0 {
		caps = append(caps, FormatUSD(e.CapUSD))
	}
	if e.CapTokens > 0 {
		caps = append(caps, thousands(e.CapTokens)+" tokens")
	}
	if e.CapWallClock != "" {
		caps = append(caps, "wall_clock "+e.CapWallClock)
	}
	switch {
	case len(caps) == 0:
		fmt.Fprintf(tw, "  cap\tnone\t(set budget.usd in the spec or --max-cost USD)\n")
	case e.CapTrials > 0:
		fmt.Fprintf(tw, "  cap\t%s\t(stops the run after about %d of %d trials start; the rest wait for a resume)\n",
			strings.Join(caps, ", "), e.CapTrials, e.Trials)
		if e.CapTrialsWorst > e.CapTrials {
			worst := ""
			if e.CapUSDWorst > 0 {
				worst = ", up to " + e.usd(e.CapUSDWorst)
			}
			fmt.Fprintf(tw, "  \t\t(with %d trials at once, those running when the cap is reached finish: up to %d trials%s)\n",
				e.Concurrency, e.CapTrialsWorst, worst)
		}
	default:
		fmt.Fprintf(tw, "  cap\t%s\t(the estimate fits)\n", strings.Join(caps, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(e.Assumptions) > 0 {
		b.WriteString("Assumed:\n")
		for _, a := range e.Assumptions {
			b.WriteString("  - " + a + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (e *Estimate) usd(v float64) string {
	if !e.USDKnown {
		return "unknown cost"
	}
	return FormatUSD(v)
}

func (e *Estimate) tokens(n int) string {
	if !e.TokensKnown {
		return "unknown"
	}
	return thousands(n)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// thousands prints n with comma separators: 1,234,567.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// avgInputTokens is the records' mean input length in tokens (rounded up).
func avgInputTokens(records []spec.Record) int {
	if len(records) == 0 {
		return 0
	}
	chars := 0
	for _, r := range records {
		chars += len(r.Input.Text)
		for _, m := range r.Input.Messages {
			chars += len(m.Content)
		}
	}
	return int(math.Ceil(float64(chars) / float64(charsPerToken*len(records))))
}

// judged reports whether an evaluator or the harness calls a judge.
func judged(s *spec.Spec) bool {
	for _, ev := range s.Evaluators {
		if spec.EvaluatorNeedsJudge(ev.Name) {
			return true
		}
	}
	return s.Harness != nil && s.Harness.Builtin != nil && s.Harness.Builtin.UserSimulator != nil
}

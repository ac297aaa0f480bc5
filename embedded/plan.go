package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"evals.si/agent"
	"evals.si/agent/builtin"
	"evals.si/agent/recording"
	"evals.si/checker"
	"evals.si/dataset"
	"evals.si/engine"
	"evals.si/evaluate"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/spec"
)

// plan turns a validated spec into an engine plan: records, connectors,
// evaluators and the trial runner.
func (a *App) plan(ctx context.Context, f *spec.File) (*engine.Plan, error) {
	s := f.Spec
	records, err := a.datasets.Load(ctx, f)
	if err != nil {
		return nil, SpecError{fmt.Errorf("loading dataset: %w", err)}
	}
	if len(records) == 0 {
		return nil, SpecError{f.Errorf("dataset", "the dataset has no records")}
	}
	mopts := model.Options{Getenv: a.getenv, Logger: a.logger, BaseDir: f.Dir}
	lims := newProviderLimits(s.Concurrency, s.Caps.ModelResponseBytes())

	evalCfgs := s.Evaluators
	if len(evalCfgs) == 0 {
		evalCfgs = defaultEvaluators(s)
	}
	var judge model.Connector
	if s.Judge != nil {
		judge, err = model.New(*s.Judge, lims.options(mopts, *s.Judge))
		if err != nil {
			return nil, SpecError{f.Errorf("judge", "judge: %v", err)}
		}
	}
	evals := make([]evaluate.Evaluator, 0, len(evalCfgs))
	for i, c := range evalCfgs {
		ev, err := evaluate.New(c, judge)
		if err != nil {
			return nil, SpecError{f.Errorf(fmt.Sprintf("evaluators[%d]", i), "%v", err)}
		}
		evals = append(evals, ev)
	}
	p := &engine.Plan{
		Name:       s.Name,
		SpecPath:   specPath(f),
		Spec:       s,
		Limits:     engine.LimitsOf(s),
		Records:    records,
		Evaluators: evalCfgs,
		Pass:       passScore(evalCfgs),
		Providers:  lims.states,
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(f.Path), filepath.Ext(f.Path))
	}
	pricing := model.DefaultPricing()
	if !s.IsAgentRun() {
		target, err := model.New(s.Target.ModelRef, lims.options(mopts, s.Target.ModelRef))
		if err != nil {
			return nil, SpecError{f.Errorf("target", "target: %v", err)}
		}
		p.Runner = &engine.PlainRunner{Target: target, Model: s.Target.Model, Pricing: pricing, Evaluators: evals}
		return p, nil
	}

	cfg := spec.Builtin{}
	if s.Harness != nil && s.Harness.Builtin != nil {
		cfg = *s.Harness.Builtin
	}
	if err := a.preflight(ctx, f); err != nil {
		return nil, err
	}
	if p.Records, err = a.recordPolicies(f, records); err != nil {
		return nil, err
	}
	pricing = pricing.Merge(cfg.Pricing)
	rec, err := openRecorder(f, cfg, p.Name)
	if err != nil {
		return nil, err
	}
	user, err := a.userSimulator(f, cfg, lims, mopts, rec)
	if err != nil {
		return nil, err
	}
	if t := cfg.Tools; t != nil && (len(t.MCP) > 0 || len(t.Mocks) > 0 || len(t.Faults) > 0) &&
		(s.Target.Agent != nil || (s.Harness != nil && s.Harness.External != nil)) {
		// Only the built-in agent's tool calls pass through the harness;
		// silently dropping these would make a run look tested when it is not.
		return nil, SpecError{f.Errorf("harness.builtin.tools", "harness.builtin.tools applies only to the built-in agent; with target.agent or harness.external the agent brings its own tools (remove tools, or drop target.agent/harness.external)")}
	}
	var ag agent.Agent
	if s.Harness != nil && s.Harness.External != nil {
		ag, err = a.externalAgent(ctx, f, lims.options(mopts, s.Target.ModelRef), pricing)
		if err != nil {
			return nil, err
		}
	} else if s.Target.Agent != nil {
		ag, err = a.targetAgent(ctx, f, records, mopts)
		if err != nil {
			return nil, err
		}
	} else {
		conn, err := model.New(s.Target.ModelRef, lims.options(mopts, s.Target.ModelRef))
		if err != nil && !pureReplay(cfg) {
			return nil, SpecError{f.Errorf("target", "target: %v", err)}
		}
		conn = recorded(rec, recording.RoleAgent, conn)
		b := builtin.New(engine.TimedConnector(conn), s.Target.Model, cfg, pricing, a.logger)
		// Resolve the tool-call protocol now (auto probes the endpoint once),
		// so forcing native where it is unsupported fails before any trial.
		if _, err := b.Protocol(ctx); err != nil {
			return nil, SpecError{f.Errorf("harness.builtin.tool_call_mode", "%v", err)}
		}
		if err := a.builtinTools(ctx, f, p.Name, b, cfg.Tools); err != nil {
			return nil, err
		}
		ag = recordedAgent(rec, b)
	}
	checkers := checker.NewRegistry()
	registerBenchParsers(checkers)
	if env := s.Environment; env != nil && env.Checker != nil {
		if err := checkParser(checkers, env.Checker.Parser); err != nil {
			closeAgent(a.logger, ag)
			return nil, SpecError{f.Errorf("environment.checker.parser", "%v", err)}
		}
	}
	var escalation []string
	if cfg.Escalation != nil {
		escalation = cfg.Escalation.Allow
	}
	p.Runner = &engine.AgentRunner{
		Environment:     s.Environment,
		Caps:            s.Caps,
		Budget:          cfg.Budget,
		EscalationAllow: escalation,
		Envs:            a.envs,
		Agent:           ag,
		Checkers:        checkers,
		Evaluators:      evals,
		Logger:          a.logger,
		ProxyDir:        filepath.Join(a.stateDir, "proxy"),
		User:            user,
	}
	return p, nil
}

func checkParser(reg *checker.Registry, p string) error {
	if p == "" || p == "exit-code" || p == "json" || strings.HasPrefix(p, "junit:") {
		return nil
	}
	if !reg.Has(p) {
		return fmt.Errorf("checker parser %q is not registered (registered: %s)", p, strings.Join(reg.Names(), ", "))
	}
	return nil
}

// defaultEvaluators: an agent run is graded by its checker, policy and
// efficiency; a plain run by exact match.
func defaultEvaluators(s *spec.Spec) []spec.Evaluator {
	if s.IsAgentRun() {
		return []spec.Evaluator{{Name: "task-success"}, {Name: "policy-violations"}, {Name: "agent-efficiency"}}
	}
	return []spec.Evaluator{{Name: "exact-match"}}
}

// passScore is the score that counts as passing in live progress.
func passScore(evs []spec.Evaluator) string {
	for _, e := range evs {
		if e.Name == "task-success" {
			return "task-success"
		}
	}
	if len(evs) > 0 {
		if names := evaluate.ScoreNames(evs[0].Name); len(names) > 0 {
			return names[0]
		}
	}
	return ""
}

// recordPolicies refuses, before any trial runs, a run whose records'
// metadata.environment asks for a weaker sandbox than the spec file's
// environment. Records a benchmark importer made carry the task's own
// network and limits as it configured them: those are capped to the
// spec's, so the spec's author governs what such tasks may reach.
func (a *App) recordPolicies(f *spec.File, records []spec.Record) ([]spec.Record, error) {
	base := f.Spec.Environment
	if base == nil {
		base = &spec.Environment{}
		base.ApplyDefaults()
	}
	imported := false
	if u, err := url.Parse(f.Spec.Dataset.URI); err == nil && u.Scheme != "" {
		imported = slices.Contains(benchDatasets().Schemes(), strings.ToLower(u.Scheme))
	}
	out := make([]spec.Record, len(records))
	capped := map[string]int{}
	var refused []string
	for i, rec := range records {
		if imported {
			var fields []dataset.LooserField
			var err error
			if rec, fields, err = dataset.CapNetworkAndLimits(base, rec); err != nil {
				return nil, SpecError{err}
			}
			for _, fl := range fields {
				capped[fl.Field]++
			}
		}
		out[i] = rec
		// Other problems of a record surface in its own trials, as before.
		var le *dataset.LooserError
		if _, err := dataset.Environment(base, rec); errors.As(err, &le) {
			refused = append(refused, le.Error())
		}
	}
	for field, n := range capped {
		a.logger.Info("the spec's environment caps what imported tasks ask for", "field", field, "records", n)
	}
	if len(refused) > 0 {
		more := ""
		if len(refused) > 3 {
			more = fmt.Sprintf(" (and %d more records)", len(refused)-3)
			refused = refused[:3]
		}
		return nil, SpecError{f.Errorf("environment", "%s%s", strings.Join(refused, "; "), more)}
	}
	return out, nil
}

// preflight refuses to start an agent run when no sandbox rung of the
// spec's ladder works here: model output never runs outside a sandbox, and
// failing every trial one by one would only hide that.
func (a *App) preflight(ctx context.Context, f *spec.File) error {
	pol := &spec.SandboxPolicy{}
	if env := f.Spec.Environment; env != nil && env.Sandbox != nil {
		pol = env.Sandbox
	}
	var min sandbox.Level
	if pol.MinIsolation != "" {
		l, err := sandbox.ParseLevel(pol.MinIsolation)
		if err != nil {
			return SpecError{f.Errorf("environment.sandbox.min_isolation", "%v", err)}
		}
		min = l
	}
	if _, _, err := sandbox.Select(ctx, a.rungs, pol.Ladder, min, pol.AllowUnsafeHost); err != nil {
		return SpecError{fmt.Errorf("refusing to start an agent run: %w", err)}
	}
	return nil
}

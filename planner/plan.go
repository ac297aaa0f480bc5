package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"evals.si/harness/taubench"
	"fmt"
	"log/slog"
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
	"evals.si/environment"
	"evals.si/evaluate"
	"evals.si/harness/harnesspb"
	"evals.si/model"
	"evals.si/sandbox"
	"evals.si/spec"
)

// parts are the spec's sections, resolved once at the top of Plan and
// handed down: each helper takes the parts it works on, and a where for
// the positions of its errors.
type parts struct {
	// dir is the spec file's directory: relative paths are against it.
	dir     string
	target  spec.Target
	harness *spec.Harness // nil in a plain run
	// builtin is harness.builtin, or the zero one.
	builtin spec.Builtin
	env     *spec.Environment
	// evals are the evaluator configs in effect: the spec's, or the
	// defaults.
	evals  []spec.Evaluator
	judge  *spec.ModelRef
	limits engine.Limits
	models models
}

// models builds the run's connectors: with the options they share, and
// through the run's provider limits.
type models struct {
	opts model.Options
	lims *providerLimits
}

// connector builds ref's connector, its calls through ref's provider
// limiter.
func (m models) connector(ref spec.ModelRef) (model.Connector, error) {
	return model.New(ref, m.options(ref))
}

// options are the model options for ref, through its provider limiter.
func (m models) options(ref spec.ModelRef) model.Options {
	return m.lims.options(m.opts, ref)
}

func (h *Host) resolve(f *spec.File) *parts {
	s := f.Spec
	lim := engine.LimitsOf(s)
	pt := &parts{
		dir:     f.Dir,
		target:  s.Target,
		harness: s.Harness,
		env:     s.Environment,
		evals:   s.Evaluators,
		judge:   s.Judge,
		limits:  lim,
		models: models{
			opts: model.Options{Getenv: h.getenv(), Logger: h.logger(), BaseDir: f.Dir},
			lims: newProviderLimits(lim.Concurrency, lim.Caps.ModelResponseBytes()),
		},
	}
	if len(pt.evals) == 0 {
		pt.evals = defaultEvaluators(s.IsAgentRun())
	}
	if s.Harness != nil && s.Harness.Builtin != nil {
		pt.builtin = *s.Harness.Builtin
	}
	return pt
}

// external is harness.external, nil when the harness is not external.
func (pt *parts) external() *spec.External {
	if pt.harness == nil {
		return nil
	}
	return pt.harness.External
}

// ownAgent reports whether the agent brings its own model calls and tools
// (target.agent or harness.external): the built-in harness's tools and
// recording do not apply to it.
func (pt *parts) ownAgent() bool { return pt.target.Agent != nil || pt.external() != nil }

// Records loads the spec's dataset and applies the record policies an
// agent run's records must pass (see recordPolicies): what a submitter
// does once, before any trial exists.
func (h *Host) Records(ctx context.Context, f *spec.File) ([]spec.Record, error) {
	records, err := h.datasets().Load(ctx, f)
	if err != nil {
		return nil, SpecError{fmt.Errorf("loading dataset: %w", err)}
	}
	if len(records) == 0 {
		return nil, SpecError{f.Errorf("dataset", "the dataset has no records")}
	}
	if !f.Spec.IsAgentRun() {
		return records, nil
	}
	return recordPolicies(f, f.Spec.Environment, f.Spec.Dataset.URI, records, h.logger())
}

// Plan turns a validated spec into an engine plan: connectors, evaluators
// and the trial runner. It does not load the dataset: the plan's Records
// are nil, for the caller to set (embedded mode) or to leave (a worker
// gets each record with its lease). Close is never nil; it stops what the
// plan started (an external harness).
func (h *Host) Plan(ctx context.Context, f *spec.File) (*engine.Plan, error) {
	s := f.Spec
	pt := h.resolve(f)
	evals, err := pt.evaluators(f)
	if err != nil {
		return nil, err
	}
	p := &engine.Plan{
		Name:       s.Name,
		SpecPath:   specPath(f),
		Spec:       s,
		Limits:     pt.limits,
		Evaluators: pt.evals,
		Pass:       passScore(pt.evals),
		Providers:  pt.models.lims.states,
		Close:      func() {},
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(f.Path), filepath.Ext(f.Path))
	}
	if !s.IsAgentRun() {
		target, err := pt.models.connector(pt.target.ModelRef)
		if err != nil {
			return nil, SpecError{f.Errorf("target", "target: %v", err)}
		}
		p.Runner = &engine.PlainRunner{Target: target, Model: pt.target.Model, Pricing: model.DefaultPricing(), Evaluators: evals}
		return p, nil
	}
	r, err := h.agentRunner(ctx, f, pt, p.Name, evals)
	if err != nil {
		return nil, err
	}
	if !r.NoSandbox {
		if err := h.preflight(ctx, f, pt.env); err != nil {
			closeAgent(h.logger(), r.Agent)
			return nil, err
		}
	}
	p.Runner = r
	p.Close = func() { closeAgent(h.logger(), r.Agent) }
	return p, nil
}

// evaluators builds the judge and the evaluators in effect.
func (pt *parts) evaluators(at where) ([]evaluate.Evaluator, error) {
	var judge model.Connector
	if pt.judge != nil {
		var err error
		if judge, err = pt.models.connector(*pt.judge); err != nil {
			return nil, SpecError{at.Errorf("judge", "judge: %v", err)}
		}
	}
	evals := make([]evaluate.Evaluator, 0, len(pt.evals))
	for i, c := range pt.evals {
		ev, err := evaluate.New(c, judge)
		if err != nil {
			return nil, SpecError{at.Errorf(fmt.Sprintf("evaluators[%d]", i), "%v", err)}
		}
		evals = append(evals, ev)
	}
	return evals, nil
}

// agentRunner builds an agent run's trial runner: the agent (built-in,
// target.agent or harness.external), its user simulator and the checker
// parsers.
func (h *Host) agentRunner(ctx context.Context, at where, pt *parts, run string, evals []evaluate.Evaluator) (*engine.AgentRunner, error) {
	cfg := pt.builtin
	pricing := model.DefaultPricing().Merge(cfg.Pricing)
	rec, err := openRecorder(at, cfg.Recording, pt.ownAgent(), pt.dir, run)
	if err != nil {
		return nil, err
	}
	user, err := userSimulator(at, cfg, pt.judge, pt.models, rec)
	if err != nil {
		return nil, err
	}
	if t := cfg.Tools; t != nil && (len(t.MCP) > 0 || len(t.Mocks) > 0 || len(t.Faults) > 0) && pt.ownAgent() {
		// Only the built-in agent's tool calls pass through the harness;
		// silently dropping these would make a run look tested when it is not.
		return nil, SpecError{at.Errorf("harness.builtin.tools", "harness.builtin.tools applies only to the built-in agent; with target.agent or harness.external the agent brings its own tools (remove tools, or drop target.agent/harness.external)")}
	}
	var ag agent.Agent
	noSandbox := false
	switch {
	case pt.external() != nil && pt.external().Python == taubench.PythonClass:
		if ag, err = h.taubenchAgent(at, pt, pricing); err != nil {
			return nil, err
		}
		noSandbox = true
	case pt.external() != nil:
		ext, err := h.externalAgent(ctx, at, pt.target, *pt.external(), pt.dir, pt.models, pricing)
		if err != nil {
			return nil, err
		}
		if noSandbox = !ext.NeedsSandbox(); noSandbox && setsEnvironment(pt.env) {
			name, _, _, _ := ext.Info()
			ext.Close()
			return nil, SpecError{at.Errorf("environment", "the external harness %s works without a sandbox (it advertises %s), so the spec's environment would not be used: remove environment", name, harnesspb.CapabilityNoSandbox)}
		}
		ag = ext
	case pt.target.Agent != nil:
		ag, err = h.targetAgent(at, pt.target, pt.harness, pt.models.opts)
		if err != nil {
			return nil, err
		}
	default:
		conn, err := pt.models.connector(pt.target.ModelRef)
		if err != nil && !pureReplay(cfg) {
			return nil, SpecError{at.Errorf("target", "target: %v", err)}
		}
		conn = recorded(rec, recording.RoleAgent, conn)
		b := builtin.New(engine.TimedConnector(conn), pt.target.Model, cfg, pricing, h.logger())
		// Resolve the tool-call protocol now (auto probes the endpoint once),
		// so forcing native where it is unsupported fails before any trial.
		if _, err := b.Protocol(ctx); err != nil {
			return nil, SpecError{at.Errorf("harness.builtin.tool_call_mode", "%v", err)}
		}
		if err := h.builtinTools(ctx, at, pt.dir, run, b, cfg.Tools); err != nil {
			return nil, err
		}
		ag = recordedAgent(rec, b)
	}
	checkers := checker.NewRegistry()
	registerBenchParsers(checkers)
	if env := pt.env; env != nil && env.Checker != nil {
		if err := checkParser(checkers, env.Checker.Parser); err != nil {
			closeAgent(h.logger(), ag)
			return nil, SpecError{at.Errorf("environment.checker.parser", "%v", err)}
		}
	}
	var escalation []string
	if cfg.Escalation != nil {
		escalation = cfg.Escalation.Allow
	}
	return &engine.AgentRunner{
		Environment:     pt.env,
		Caps:            pt.limits.Caps,
		Budget:          cfg.Budget,
		EscalationAllow: escalation,
		Envs:            h.Envs,
		Agent:           ag,
		Checkers:        checkers,
		Evaluators:      evals,
		Logger:          h.logger(),
		ProxyDir:        h.ProxyDir,
		Egress:          h.Egress,
		User:            user,
		NoSandbox:       noSandbox,
	}, nil
}

// setsEnvironment reports whether env says more than the defaults an agent
// run's spec gets when it names no environment.
func setsEnvironment(env *spec.Environment) bool {
	if env == nil {
		return false
	}
	var none spec.Environment
	none.ApplyDefaults()
	a, errA := json.Marshal(env)
	b, errB := json.Marshal(&none)
	return errA != nil || errB != nil || !bytes.Equal(a, b)
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
func defaultEvaluators(agentRun bool) []spec.Evaluator {
	if agentRun {
		return []spec.Evaluator{{Name: "task-success"}, {Name: "policy-violations"}, {Name: "agent-efficiency"}}
	}
	return []spec.Evaluator{{Name: "exact-match"}}
}

// PassScore is the score that counts as passing in a run's live progress
// (for a client following a run on a server, which has no plan).
func PassScore(s *spec.Spec) string {
	evs := s.Evaluators
	if len(evs) == 0 {
		evs = defaultEvaluators(s.IsAgentRun())
	}
	return passScore(evs)
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
// environment (env). Records a benchmark importer made (the dataset uri
// has an importer's scheme) carry the task's own network and limits as it
// configured them: those are capped to the spec's, so the spec's author
// governs what such tasks may reach.
func recordPolicies(at where, env *spec.Environment, uri string, records []spec.Record, log *slog.Logger) ([]spec.Record, error) {
	base := env
	if base == nil {
		base = &spec.Environment{}
		base.ApplyDefaults()
	}
	imported := false
	if u, err := url.Parse(uri); err == nil && u.Scheme != "" {
		imported = slices.Contains(Datasets().Schemes(), strings.ToLower(u.Scheme))
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
		log.Info("the spec's environment caps what imported tasks ask for", "field", field, "records", n)
	}
	if len(refused) > 0 {
		more := ""
		if len(refused) > 3 {
			more = fmt.Sprintf(" (and %d more records)", len(refused)-3)
			refused = refused[:3]
		}
		return nil, SpecError{at.Errorf("environment", "%s%s", strings.Join(refused, "; "), more)}
	}
	return out, nil
}

// preflight refuses to start an agent run when no sandbox rung of the
// spec's ladder works here: model output never runs outside a sandbox, and
// failing every trial one by one would only hide that.
func (h *Host) preflight(ctx context.Context, at where, env *spec.Environment) error {
	pol := &spec.SandboxPolicy{}
	if env != nil && env.Sandbox != nil {
		pol = env.Sandbox
	}
	var min sandbox.Level
	if pol.MinIsolation != "" {
		l, err := sandbox.ParseLevel(pol.MinIsolation)
		if err != nil {
			return SpecError{at.Errorf("environment.sandbox.min_isolation", "%v", err)}
		}
		min = l
	}
	rungs := sandbox.RungsFor(h.Rungs, func(name string) *sandbox.VMSettings { s, _ := environment.VMSettings(pol, name); return s })
	if _, _, err := sandbox.Select(ctx, rungs, pol.Ladder, min, pol.AllowUnsafeHost); err != nil {
		return SpecError{fmt.Errorf("refusing to start an agent run: %w", err)}
	}
	return nil
}

// specPath is the spec file's absolute path, stored with the run so that
// resume resolves relative dataset paths as the run did, from any directory.
func specPath(f *spec.File) string {
	switch {
	case f.Path == "" || filepath.IsAbs(f.Path):
		return f.Path
	case filepath.IsAbs(f.Dir):
		return filepath.Join(f.Dir, filepath.Base(f.Path))
	}
	if abs, err := filepath.Abs(f.Path); err == nil {
		return abs
	}
	return f.Path
}

package embedded

import (
	"context"
	"io"
	"log/slog"

	"evals.si/agent"
	"evals.si/engine"
	"evals.si/harness/external"
	"evals.si/model"
	"evals.si/spec"
)

// externalAgent connects to harness.external (starting it for the command
// and python forms). Its Worker.Chat is the spec's target model, called
// through the worker's connector: the harness never holds the credentials.
func (a *App) externalAgent(ctx context.Context, f *spec.File, mopts model.Options, pricing model.Pricing) (agent.Agent, error) {
	s := f.Spec
	if s.Target.Agent != nil {
		return nil, SpecError{f.Errorf("target.agent", "harness.external drives the target model (target: {connector, model}); it cannot run a target.agent")}
	}
	conn, err := model.New(s.Target.ModelRef, mopts)
	if err != nil {
		return nil, SpecError{f.Errorf("target", "target: %v", err)}
	}
	ag, err := external.New(ctx, external.Options{
		External:  *s.Harness.External,
		Dir:       f.Dir,
		Connector: engine.TimedConnector(conn),
		Model:     s.Target.Model,
		Pricing:   pricing,
		Logger:    a.logger,
	})
	if err != nil {
		return nil, SpecError{f.Errorf("harness.external", "%v", err)}
	}
	return ag, nil
}

// closePlan releases what the plan's agent holds (an external harness the
// worker started is stopped) once the run is over.
func (a *App) closePlan(p *engine.Plan) {
	if r, ok := p.Runner.(*engine.AgentRunner); ok {
		closeAgent(a.logger, r.Agent)
	}
}

func closeAgent(log *slog.Logger, ag agent.Agent) {
	if c, ok := ag.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("closing the run's agent", "err", err)
		}
	}
}

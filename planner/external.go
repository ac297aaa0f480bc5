package planner

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
//
// dir is the spec file's directory, the harness's working directory.
func (h *Host) externalAgent(ctx context.Context, at where, target spec.Target, ext spec.External, dir string, m models, pricing model.Pricing) (agent.Agent, error) {
	if target.Agent != nil {
		return nil, SpecError{at.Errorf("target.agent", "harness.external drives the target model (target: {connector, model}); it cannot run a target.agent")}
	}
	conn, err := m.connector(target.ModelRef)
	if err != nil {
		return nil, SpecError{at.Errorf("target", "target: %v", err)}
	}
	ag, err := external.New(ctx, external.Options{
		External:  ext,
		Dir:       dir,
		Connector: engine.TimedConnector(conn),
		Model:     target.Model,
		Pricing:   pricing,
		Logger:    h.logger(),
	})
	if err != nil {
		return nil, SpecError{at.Errorf("harness.external", "%v", err)}
	}
	return ag, nil
}

// closeAgent releases what the plan's agent holds (an external harness the
// worker started is stopped) once the run is over.
func closeAgent(log *slog.Logger, ag agent.Agent) {
	if c, ok := ag.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("closing the run's agent", "err", err)
		}
	}
}

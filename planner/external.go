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
//
// With target.agent: {oracle: {}} the harness runs for the oracle: no model
// is called, and each task tells the harness to answer with its reference
// solution (BFCL's ground truth), so its grading is validated without a
// model. No other target.agent can drive an external harness.
func (h *Host) externalAgent(ctx context.Context, at where, target spec.Target, ext spec.External, dir string, m models, pricing model.Pricing) (*external.Agent, error) {
	o := external.Options{External: ext, Dir: dir, Model: target.Model, Pricing: pricing, Logger: h.logger()}
	switch {
	case target.Agent != nil && target.Agent.Oracle != nil:
		o.Oracle, o.Model = true, "oracle"
	case target.Agent != nil:
		return nil, SpecError{at.Errorf("target.agent", "harness.external drives the target model (target: {connector, model}); of the target agents it runs only the oracle (target.agent: {oracle: {}})")}
	default:
		conn, err := m.connector(target.ModelRef)
		if err != nil {
			return nil, SpecError{at.Errorf("target", "target: %v", err)}
		}
		o.Connector = engine.TimedConnector(conn)
	}
	ag, err := external.New(ctx, o)
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

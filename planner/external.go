package planner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"evals.si/agent"
	"evals.si/engine"
	"evals.si/harness/external"
	"evals.si/internal/loglevel"
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
	done := startNotice(h.logger(), ext)
	ag, err := external.New(ctx, o)
	done(err)
	if err != nil {
		return nil, SpecError{at.Errorf("harness.external", "%v", err)}
	}
	return ag, nil
}

// startNotice says that a harness the worker starts is being started, and
// when it is ready, with how long it took: the first `go run` of a Go
// harness compiles for minutes with no output otherwise. The returned func
// reports the end (err: the start failed). An address form starts nothing.
func startNotice(log *slog.Logger, ext spec.External) func(err error) {
	var name, what string
	switch {
	case len(ext.Command) > 0:
		name = strings.Join(ext.Command, " ")
		what = "starting external harness " + name
		if filepath.Base(ext.Command[0]) == "go" && len(ext.Command) > 1 && ext.Command[1] == "run" {
			what = "building external harness " + name + " (first run compiles; cached after)"
		}
	case ext.Python != "":
		name = ext.Python
		what = "starting external harness " + name
	default:
		return func(error) {}
	}
	ctx := context.Background() // the notice's own: logging is not cancelled
	log.Log(ctx, loglevel.Notice, what)
	start := time.Now()
	return func(err error) {
		took := time.Since(start).Round(100 * time.Millisecond)
		if err != nil {
			log.Log(ctx, loglevel.Notice, fmt.Sprintf("external harness %s did not start (after %s)", name, took))
			return
		}
		log.Log(ctx, loglevel.Notice, fmt.Sprintf("external harness %s ready after %s", name, took), "took", took)
	}
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

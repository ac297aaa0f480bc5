package planner

import (
	"evals.si/agent"
	"evals.si/engine"
	"evals.si/harness/taubench"
	"evals.si/model"
)

// taubenchAgent builds TauBenchHarness (harness.external.python:
// evalsi_taubench:TauBenchHarness), which runs in this process: the
// target model plays the agent and the spec's judge the user. With
// target.agent: {oracle: {}} each task's gold actions are replayed and no
// model is called. The harness needs no sandbox.
func (h *Host) taubenchAgent(at where, pt *parts, pricing model.Pricing) (agent.Agent, error) {
	if setsEnvironment(pt.env) {
		return nil, SpecError{at.Errorf("environment", "%s runs τ-bench tasks against tau2's simulated environment, without a sandbox, so the spec's environment would not be used: remove environment", taubench.PythonClass)}
	}
	o := taubench.Options{Pricing: pricing, Logger: h.logger()}
	switch {
	case pt.target.Agent != nil && pt.target.Agent.Oracle != nil:
		o.Oracle = true
	case pt.target.Agent != nil:
		return nil, SpecError{at.Errorf("target.agent", "%s drives the target model (target: {connector, model}); of the target agents it runs only the oracle (target.agent: {oracle: {}})", taubench.PythonClass)}
	default:
		conn, err := pt.models.connector(pt.target.ModelRef)
		if err != nil {
			return nil, SpecError{at.Errorf("target", "target: %v", err)}
		}
		if pt.judge == nil {
			return nil, SpecError{at.Errorf("judge", "%s simulates the user with the run's judge: set judge (a model, as target is)", taubench.PythonClass)}
		}
		judge, err := pt.models.connector(*pt.judge)
		if err != nil {
			return nil, SpecError{at.Errorf("judge", "judge: %v", err)}
		}
		o.Agent, o.AgentModel = engine.TimedConnector(conn), pt.target.Model
		o.User, o.UserModel = engine.TimedConnector(judge), pt.judge.Model
	}
	ag, err := taubench.New(o)
	if err != nil {
		return nil, SpecError{at.Errorf("harness.external", "%v", err)}
	}
	return ag, nil
}

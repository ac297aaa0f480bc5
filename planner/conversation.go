package planner

import (
	"path/filepath"

	"evals.si/agent"
	"evals.si/agent/recording"
	"evals.si/agent/usersim"
	"evals.si/model"
	"evals.si/spec"
)

// openRecorder opens harness.builtin.recording, its dir relative to the
// spec file; nil when the spec records nothing. Replaying a directory that
// holds no recording is a spec error, caught before any trial.
//
// ownAgent says the agent is not the built-in one; dir is the spec file's
// directory.
func openRecorder(at where, rc *spec.Recording, ownAgent bool, dir, name string) (*recording.Recorder, error) {
	if rc == nil {
		return nil, nil
	}
	if ownAgent {
		// Only the built-in agent's model calls pass through this harness.
		return nil, SpecError{at.Errorf("harness.builtin.recording", "recording records the built-in agent; it does not work with target.agent or harness.external")}
	}
	path := rc.Dir
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	rec, err := recording.Open(*rc, path, name)
	if err != nil {
		return nil, SpecError{at.Errorf("harness.builtin.recording.dir", "%v", err)}
	}
	return rec, nil
}

// pureReplay is a replay without branch_at_step: no model call goes to a
// live model, so a connector that cannot be built here (no API key on this
// machine) is not needed.
func pureReplay(cfg spec.Builtin) bool {
	return cfg.Recording != nil && cfg.Recording.Mode == recording.ModeReplay && cfg.Recording.BranchAtStep == 0
}

// recorded wraps conn for recording or replay under role; conn itself when
// nothing is recorded.
func recorded(rec *recording.Recorder, role string, conn model.Connector) model.Connector {
	if rec == nil {
		return conn
	}
	return rec.Connector(role, conn)
}

// recordedAgent wraps ag so its trials are recorded or replayed.
func recordedAgent(rec *recording.Recorder, ag agent.Agent) agent.Agent {
	if rec == nil {
		return ag
	}
	return rec.Agent(ag)
}

// userSimulator builds harness.builtin.user_simulator, speaking through
// user_simulator.judge, else the spec's judge; nil when there is none.
func userSimulator(at where, cfg spec.Builtin, judge *spec.ModelRef, m models, rec *recording.Recorder) (agent.User, error) {
	us := cfg.UserSimulator
	if us == nil {
		return nil, nil
	}
	field, ref := "harness.builtin.user_simulator.judge", us.Judge
	if ref == nil {
		field, ref = "judge", judge
	}
	if ref == nil {
		return nil, SpecError{at.Errorf("harness.builtin.user_simulator", "the user simulator needs a judge model: set harness.builtin.user_simulator.judge or the spec's judge")}
	}
	conn, err := m.connector(*ref)
	if err != nil && !pureReplay(cfg) {
		return nil, SpecError{at.Errorf(field, "user simulator judge: %v", err)}
	}
	return usersim.New(recorded(rec, usersim.Role, conn), ref.Model, *us), nil
}

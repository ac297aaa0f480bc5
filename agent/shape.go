package agent

import "evals.si/spec"

// EnvironmentShaper is implemented by agents that need something of the
// task's environment: a CLI agent's install commands join the setup (so they
// are part of the setup snapshot's identity and run once per distinct
// environment) and its allow_hosts join the sandbox's network allowlist.
// The engine applies it to each trial's environment before preparing it.
type EnvironmentShaper interface {
	// ShapeEnvironment returns env as the agent needs it. It must not
	// modify env (it is shared between trials): it returns a modified copy,
	// or env itself when there is nothing to change.
	ShapeEnvironment(env *spec.Environment) *spec.Environment
}

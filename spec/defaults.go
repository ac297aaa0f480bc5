package spec

import (
	"runtime"
	"time"
)

// Default values. They are documented here once; the JSON Schema and the
// docs quote them.
const (
	DefaultTrials         = 1
	DefaultRetries        = 2
	DefaultTrialTimeout   = 30 * time.Minute
	DefaultWorkdir        = "/workspace"
	DefaultNetwork        = "deny"
	DefaultSetupNetwork   = "deny"
	DefaultCgroup         = "auto"
	DefaultParser         = "exit-code"
	DefaultCheckerTimeout = 10 * time.Minute
	DefaultCommandTimeout = 2 * time.Minute
	DefaultMaxSteps       = 30
	// Caps (see Caps): sandbox command output per stream, one model
	// response body, one event text and all event texts of a trial attempt
	// in the engine's memory.
	DefaultCommandOutputKB = 1024
	DefaultModelResponseMB = 64
	DefaultEventTextKB     = 64
	DefaultTrialMemoryMB   = 16
)

// DefaultLadder is the sandbox ladder, strongest rung first.
func DefaultLadder() []string { return []string{"firecracker", "bwrap", "landlock"} }

// DefaultLadderFor is the default ladder for a min_isolation: for vm, the
// VM rungs (firecracker, then qemu, which the default ladder leaves out
// because under software emulation a VM costs seconds), as
// sandbox.DefaultLadderFor.
func DefaultLadderFor(minIsolation string) []string {
	if minIsolation == "vm" {
		return []string{"firecracker", "qemu"}
	}
	return DefaultLadder()
}

// DefaultConcurrency is 2 × the number of CPUs.
func DefaultConcurrency() int { return 2 * runtime.NumCPU() }

// ApplyDefaults fills in unset fields. Parse and Load call it; a spec built
// in code or decoded from JSON (an EvalRun) should call it before Validate.
// It is idempotent.
//
// Every spec gets trials, concurrency, retries and trial_timeout. Only an
// agent run (IsAgentRun) gets an environment and its sandbox and timeouts,
// so defaults never turn a model run into an agent run. The checker's
// defaults apply only when the spec has a checker, and max_steps only when
// it has harness.builtin. The run name defaults, in Parse, to the file's
// base name without extension.
func (s *Spec) ApplyDefaults() {
	if s.Trials == 0 {
		s.Trials = DefaultTrials
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency()
	}
	if s.Retries == nil {
		r := DefaultRetries
		s.Retries = &r
	}
	if s.TrialTimeout == 0 {
		s.TrialTimeout = Duration(DefaultTrialTimeout)
	}
	if !s.IsAgentRun() {
		return
	}
	if s.Harness != nil && s.Harness.Builtin != nil && s.Harness.Builtin.MaxSteps == 0 {
		s.Harness.Builtin.MaxSteps = DefaultMaxSteps
	}
	if s.Environment == nil {
		s.Environment = &Environment{}
	}
	s.Environment.ApplyDefaults()
}

// ApplyDefaults fills in an environment's unset fields: setup_network,
// command_timeout, the sandbox's workdir, network, ladder and cgroup, and,
// when there is a checker, its parser and timeout. The dataset package
// calls it again after a record's metadata.environment is merged in.
func (e *Environment) ApplyDefaults() {
	if e.SetupNetwork == "" {
		e.SetupNetwork = DefaultSetupNetwork
	}
	if e.CommandTimeout == 0 {
		e.CommandTimeout = Duration(DefaultCommandTimeout)
	}
	if e.Sandbox == nil {
		e.Sandbox = &SandboxPolicy{}
	}
	sb := e.Sandbox
	if sb.Workdir == "" {
		sb.Workdir = DefaultWorkdir
	}
	if sb.Network == "" {
		sb.Network = DefaultNetwork
	}
	if len(sb.Ladder) == 0 {
		sb.Ladder = DefaultLadderFor(sb.MinIsolation)
	}
	if sb.Cgroup == "" {
		sb.Cgroup = DefaultCgroup
	}
	if c := e.Checker; c != nil {
		if c.Parser == "" {
			c.Parser = DefaultParser
		}
		if c.Timeout == 0 {
			c.Timeout = Duration(DefaultCheckerTimeout)
		}
	}
}

// Package harnesspb holds the harness protocol (harness.proto) and its
// generated Go code, plus the constants both sides agree on.
package harnesspb

// ProtocolVersion is the protocol version this build speaks. The worker
// refuses a harness whose Describe answers another major version.
const ProtocolVersion = "1"

// SocketEnv names the environment variable through which the worker tells
// a harness it starts (the command and python forms) the unix socket path to
// serve the Harness service on.
const SocketEnv = "EVALSI_HARNESS_SOCKET"

// CapabilityCheck is advertised by a harness whose Check returns a verdict.
const CapabilityCheck = "check"

// CapabilityNoSandbox is advertised by a harness that never uses the
// trial's sandbox (BFCL calls only the model and Python objects of its
// own): the worker creates none, and the spec must not set an environment.
// Worker.Exec, ReadFile and WriteFile fail for its trials.
const CapabilityNoSandbox = "no-sandbox"

package tools

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"evals.si/spec"
	"evals.si/trajectory"
)

// Fault kinds (harness.builtin.tools.faults[].kind).
const (
	FaultError     = "error"     // the tool is not run; the result is an error
	FaultTimeout   = "timeout"   // the tool is not run; the result says it timed out
	FaultMalformed = "malformed" // the tool runs; the model gets a corrupted result
)

// AnyTool in faults[].tool matches every tool.
const AnyTool = "*"

// Faults decides, deterministically, which tool calls get an injected fault
// (harness.builtin.tools.faults).
//
// The decision for a call hashes the run's name, the record id, the trial,
// the step, the call's index within the step (from 0) and the tool name,
// joined with NUL bytes (integers in decimal), with SHA-256; the first 8
// bytes, big-endian, shifted right by 11 bits and divided by 2^53 give a
// uniform u in [0, 1). The rules naming the tool (or "*") are taken in spec
// order, their rates added up: the first rule whose running sum exceeds u
// decides the kind. So rerunning a spec of the same name injects the same
// faults at the same calls, a rate of 0 never fires and a rate of 1 always
// does, and rules for one tool are exclusive (their rates add, up to 1).
type Faults struct {
	run   string
	rules []spec.Fault
}

// NewFaults returns the faults of a run named run. It checks kinds and
// rates, so a hand-built rule list fails as a validated spec would.
func NewFaults(run string, rules []spec.Fault) (*Faults, error) {
	for i, r := range rules {
		if r.Tool == "" {
			return nil, fmt.Errorf("harness.builtin.tools.faults[%d]: a fault needs tool (a tool name as the model sees it, or \"*\")", i)
		}
		switch r.Kind {
		case FaultError, FaultTimeout, FaultMalformed:
		default:
			return nil, fmt.Errorf("harness.builtin.tools.faults[%d].kind: %q is not one of error, timeout, malformed", i, r.Kind)
		}
		if math.IsNaN(r.Rate) || r.Rate < 0 || r.Rate > 1 {
			return nil, fmt.Errorf("harness.builtin.tools.faults[%d].rate: %v is not a fraction from 0 to 1", i, r.Rate)
		}
	}
	return &Faults{run: run, rules: slices.Clone(rules)}, nil
}

// Check reports a rule naming a tool the agent does not have: such a rule
// would silently never fire.
func (f *Faults) Check(tools []string) error {
	if f == nil {
		return nil
	}
	for i, r := range f.rules {
		if r.Tool != AnyTool && !slices.Contains(tools, r.Tool) {
			return fmt.Errorf("harness.builtin.tools.faults[%d].tool: the agent has no tool %q (its tools: %s; \"*\" matches all)", i, r.Tool, strings.Join(tools, ", "))
		}
	}
	return nil
}

// Decide returns the fault kind to inject into a call, or "" for none.
func (f *Faults) Decide(record string, trial, step, index int, tool string) string {
	if f == nil || len(f.rules) == 0 {
		return ""
	}
	u := Uniform(f.run, record, trial, step, index, tool)
	sum := 0.0
	for _, r := range f.rules {
		if r.Tool != AnyTool && r.Tool != tool {
			continue
		}
		sum += r.Rate
		if u < sum {
			return r.Kind
		}
	}
	return ""
}

// Uniform is the deterministic draw in [0, 1) for one call (see Faults).
func Uniform(run, record string, trial, step, index int, tool string) float64 {
	key := strings.Join([]string{run, record, strconv.Itoa(trial), strconv.Itoa(step), strconv.Itoa(index), tool}, "\x00")
	sum := sha256.Sum256([]byte(key))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// Injected is the result of a call that an error or timeout fault stopped
// before the tool ran.
func Injected(kind string, call trajectory.ToolCall) trajectory.ToolResult {
	res := trajectory.ToolResult{CallID: call.ID, Name: call.Name, IsError: true, Fault: kind}
	switch kind {
	case FaultTimeout:
		res.Output = fmt.Sprintf("error: tool %s timed out before returning a result", call.Name)
	default:
		res.Output = fmt.Sprintf("error: tool %s failed: injected error", call.Name)
	}
	return res
}

// Malform corrupts a result the tool really returned: the output becomes
// {"output":" followed by the first half (in runes, rounded down) of the
// real output, JSON-escaped, and nothing after it: a truncated JSON
// document that does not parse. IsError, ExitCode and Truncated are kept.
func Malform(res trajectory.ToolResult) trajectory.ToolResult {
	r := []rune(res.Output)
	half, _ := json.Marshal(string(r[:len(r)/2]))
	res.Output = `{"output":` + strings.TrimSuffix(string(half), `"`)
	res.Fault = FaultMalformed
	return res
}

package limits

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// Rlimit is one resource limit, set as both soft and hard limit so the
// command cannot raise it back.
type Rlimit struct {
	// Name is the short name used in reports and on helper command lines:
	// as, fsize, nproc, core, nofile.
	Name  string
	Value uint64
}

var rlimitResources = map[string]int{
	"as":     unix.RLIMIT_AS,
	"fsize":  unix.RLIMIT_FSIZE,
	"nproc":  unix.RLIMIT_NPROC,
	"core":   unix.RLIMIT_CORE,
	"nofile": unix.RLIMIT_NOFILE,
}

// String renders the limit as name=value, the form ParseRlimit reads.
func (r Rlimit) String() string { return r.Name + "=" + strconv.FormatUint(r.Value, 10) }

// Describe renders the limit for an isolation report ("rlimit-as=512MB").
func (r Rlimit) Describe() string {
	switch r.Name {
	case "as", "fsize":
		return fmt.Sprintf("rlimit-%s=%dMB", r.Name, r.Value>>20)
	}
	return fmt.Sprintf("rlimit-%s=%d", r.Name, r.Value)
}

// ParseRlimit reads name=value.
func ParseRlimit(s string) (Rlimit, error) {
	name, val, ok := strings.Cut(s, "=")
	if _, known := rlimitResources[name]; !ok || !known {
		return Rlimit{}, fmt.Errorf("bad rlimit %q: want NAME=VALUE with NAME one of as, fsize, nproc, core, nofile", s)
	}
	v, err := strconv.ParseUint(val, 10, 64)
	if err != nil {
		return Rlimit{}, fmt.Errorf("bad rlimit %q: %w", s, err)
	}
	return Rlimit{Name: name, Value: v}, nil
}

// Resource is the RLIMIT_* number.
func (r Rlimit) Resource() (int, error) {
	res, ok := rlimitResources[r.Name]
	if !ok {
		return 0, fmt.Errorf("unknown rlimit resource %q", r.Name)
	}
	return res, nil
}

// Apply sets the limit on the calling process; children inherit it.
func (r Rlimit) Apply() error {
	res, ok := rlimitResources[r.Name]
	if !ok {
		return fmt.Errorf("setting rlimit %s: unknown resource", r.Name)
	}
	lim := unix.Rlimit{Cur: r.Value, Max: r.Value}
	if err := unix.Setrlimit(res, &lim); err != nil {
		return fmt.Errorf("setting rlimit %s: %w", r, err)
	}
	return nil
}

// Plan is the rlimit side of a command's limits.
type Plan struct {
	// Outer rlimits are applied by the launcher before the sandbox's
	// namespaces exist (memory, file size, core dumps).
	Outer []Rlimit
	// NProc is RLIMIT_NPROC, which must be applied inside the sandbox's user
	// namespace: it counts processes per (user namespace, uid), and the
	// kernel exempts uid 0 of the initial namespace, so it holds only when
	// the sandbox's user maps to a non-root host uid. Zero means none.
	NProc uint64
}

// Default limits applied when sandbox.Limits leaves them zero.
const (
	DefaultPidsMax    = 512
	DefaultFileSizeMB = 1024
)

// PlanRlimits chooses rlimits for l. memoryByRlimit says whether memory is
// enforced by RLIMIT_AS (true when no cgroup memory controller applies);
// RLIMIT_AS bounds address space, not resident memory, so runtimes that
// reserve large virtual ranges (JVM, V8) may need more than MemoryMB.
func PlanRlimits(l sandbox.Limits, memoryByRlimit bool) Plan {
	var p Plan
	if memoryByRlimit && l.MemoryMB > 0 {
		p.Outer = append(p.Outer, Rlimit{Name: "as", Value: uint64(l.MemoryMB) << 20})
	}
	fsize := l.FileSizeMB
	if fsize <= 0 {
		fsize = DefaultFileSizeMB
	}
	p.Outer = append(p.Outer, Rlimit{Name: "fsize", Value: uint64(fsize) << 20}, Rlimit{Name: "core", Value: 0})
	pids := l.PidsMax
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	p.NProc = uint64(pids)
	return p
}

// ApplyTo sets the limit on another process (prlimit), which its future
// children inherit.
func (r Rlimit) ApplyTo(pid int) error {
	res, ok := rlimitResources[r.Name]
	if !ok {
		return fmt.Errorf("setting rlimit %s: unknown resource", r.Name)
	}
	lim := unix.Rlimit{Cur: r.Value, Max: r.Value}
	if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
		return fmt.Errorf("setting rlimit %s on pid %d: %w", r, pid, err)
	}
	return nil
}

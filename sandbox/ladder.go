package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Rung names the ladder knows. smolvm is probed but cannot run sandboxes
// yet; host is never in the default ladder.
const (
	RungFirecracker = "firecracker"
	// RungQEMU is the microVM rung under QEMU's microvm machine, KVM when
	// usable and software emulation otherwise: the same guest and disks
	// as firecracker, where Firecracker cannot run.
	RungQEMU     = "qemu"
	RungSmolVM   = "smolvm"
	RungBwrap    = "bwrap"
	RungLandlock = "landlock"
	RungDocker   = "docker"
	// RungPod is one Kubernetes pod per sandbox; a worker reaches it only
	// through a sandbox pool (evalsid sandboxd --rung pod, a SandboxClass).
	RungPod  = "pod"
	RungHost = "host"
)

// DefaultLadder is the ladder used when a spec names none, strongest first.
// It returns a fresh slice so callers may modify it.
func DefaultLadder() []string {
	return []string{RungFirecracker, RungBwrap, RungLandlock}
}

// DefaultLadderFor is the ladder a spec that names none gets with
// min_isolation min: the default one, but for vm the VM rungs, firecracker
// then qemu (which the default ladder leaves out: under software
// emulation a VM is seconds, not milliseconds, so only a task that needs
// a VM gets one).
func DefaultLadderFor(min Level) []string {
	if min >= LevelVM {
		return []string{RungFirecracker, RungQEMU}
	}
	return DefaultLadder()
}

// ErrNoRung is wrapped by Select's error when no rung of the ladder works.
var ErrNoRung = errors.New("no sandbox rung works")

// Select returns the first rung in ladder order that is available, probes as
// working and isolates at least min, with every probe it made. A rung weaker
// than min is refused, never used as a downgrade. The host rung is considered
// only when allowUnsafeHost is set, and choosing it logs a warning. When
// nothing qualifies, the error (wrapping ErrNoRung) lists every probe's reason
// so the user can see what to install or change.
func Select(ctx context.Context, available []Rung, ladder []string, min Level, allowUnsafeHost bool) (Rung, []Probe, error) {
	if len(ladder) == 0 {
		ladder = DefaultLadderFor(min)
	}
	byName := make(map[string]Rung, len(available))
	for _, r := range available {
		byName[r.Name()] = r
	}
	var probes []Probe
	for _, name := range ladder {
		if err := ctx.Err(); err != nil {
			return nil, probes, fmt.Errorf("selecting a sandbox rung: %w", err)
		}
		r, ok := byName[name]
		if !ok {
			reason := "no such rung in this build (known: " + strings.Join(names(available), ", ") + ")"
			switch {
			case name == RungPod:
				reason = "the pod rung runs only in a sandbox pool on Kubernetes (evalsid sandboxd --rung pod, or a SandboxClass); here the rungs are " + strings.Join(names(available), ", ")
			case len(available) == 1 && available[0].Name() == RungPod:
				reason = "this worker leases its sandboxes from a pod-rung pool, whose only rung is pod: add pod to environment.sandbox.ladder"
			}
			probes = append(probes, Probe{Rung: name, Reason: reason})
			continue
		}
		if name == RungHost && !allowUnsafeHost {
			probes = append(probes, Probe{Rung: name, Isolation: r.Isolation(),
				Reason: "the host rung runs commands without isolation; it is used only with allow_unsafe_host: true"})
			continue
		}
		p := r.Probe(ctx)
		p.Rung, p.Isolation = name, r.Isolation()
		if p.Works && r.Isolation() < min {
			p.Reason = fmt.Sprintf("works, but its isolation %s is below min_isolation %s (refused, never downgraded)", r.Isolation(), min)
			probes = append(probes, p)
			continue
		}
		probes = append(probes, p)
		if !p.Works {
			continue
		}
		if name == RungHost {
			slog.Warn("SANDBOX DISABLED: the host rung runs agent commands directly on this machine with NO isolation (allow_unsafe_host is set)",
				"rung", name, "isolation", r.Isolation().String())
		}
		return r, probes, nil
	}
	var b strings.Builder
	for _, p := range probes {
		fmt.Fprintf(&b, "\n  %s (%s): %s", p.Rung, p.Isolation, p.Reason)
	}
	return nil, probes, fmt.Errorf("%w (ladder [%s], min_isolation %s):%s", ErrNoRung, strings.Join(ladder, ", "), min, b.String())
}

// ProbeAll probes every rung, in order, for `evalsid sandbox probe`.
func ProbeAll(ctx context.Context, rungs []Rung) []Probe {
	out := make([]Probe, 0, len(rungs))
	for _, r := range rungs {
		p := r.Probe(ctx)
		p.Rung, p.Isolation = r.Name(), r.Isolation()
		out = append(out, p)
	}
	return out
}

func names(rs []Rung) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Name())
	}
	return out
}

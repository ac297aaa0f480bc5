package pool

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/pool/wire"
)

// Limits are the pool's own bounds over its sandboxes' limits: the pool's
// machine is the operator's, so what a client asks for is bounded here,
// not trusted. A zero field bounds nothing.
type Limits struct {
	// Max is the most a client may ask of each limit: a request over one
	// is refused, naming it. While any of memory, pids or CPUs has a
	// maximum, cgroup off is refused too, since cgroups enforce those.
	Max wire.LimitValues
	// Default is what a sandbox gets for a limit its client leaves zero.
	// With none, the sandbox gets the Max, so leaving a limit unset never
	// escapes it; except command_timeout, whose zero already means a
	// bounded default every rung applies (sandbox.DefaultCommandTimeout):
	// it keeps that default when the Max is longer, so a command that
	// hangs is not waited for longer here than on the client's own rung.
	Default wire.LimitValues
}

// limit is one field of wire.LimitValues, as numbers (a duration in
// nanoseconds) so each rule is written once.
type limit struct {
	name string // the wire and capability name
	flag string // evalsid sandboxd's flag for its maximum
	spec string // the run spec's field that asks for it
	// cgroup: the rungs enforce it with cgroups.
	cgroup bool
	get    func(*wire.LimitValues) float64
	set    func(*wire.LimitValues, float64)
	show   func(float64) string
}

func showInt(v float64) string { return strconv.FormatInt(int64(v), 10) }

var limitFields = []limit{
	{"memory_mb", "--max-memory-mb", "environment.sandbox.memory_mb", true,
		func(l *wire.LimitValues) float64 { return float64(l.MemoryMB) },
		func(l *wire.LimitValues, v float64) { l.MemoryMB = int(v) }, showInt},
	{"pids_max", "--max-pids", "environment.sandbox.pids_max", true,
		func(l *wire.LimitValues) float64 { return float64(l.PidsMax) },
		func(l *wire.LimitValues, v float64) { l.PidsMax = int(v) }, showInt},
	{"cpus", "--max-cpus", "environment.sandbox.cgroup_cpus", true,
		func(l *wire.LimitValues) float64 { return l.CPUs },
		func(l *wire.LimitValues, v float64) { l.CPUs = v },
		func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }},
	{"disk_mb", "--max-disk-mb", "environment.sandbox.disk_mb", false,
		func(l *wire.LimitValues) float64 { return float64(l.DiskMB) },
		func(l *wire.LimitValues, v float64) { l.DiskMB = int(v) }, showInt},
	{"file_size_mb", "--max-file-size-mb", "environment.sandbox.file_size_mb", false,
		func(l *wire.LimitValues) float64 { return float64(l.FileSizeMB) },
		func(l *wire.LimitValues, v float64) { l.FileSizeMB = int(v) }, showInt},
	{"command_timeout", "--max-command-timeout", "environment.command_timeout", false,
		func(l *wire.LimitValues) float64 { return float64(l.CommandTimeout) },
		func(l *wire.LimitValues, v float64) { l.CommandTimeout = time.Duration(v) },
		func(v float64) string { return time.Duration(v).String() }},
}

// check refuses limits that are not numbers a pool can hold: negative
// ones, a default over its maximum, and a bound the rung does not enforce
// (it would bound nothing while the hello claimed it does).
func (l Limits) check(rung string, enforced []string) error {
	var errs []error
	for _, f := range limitFields {
		mx, def := f.get(&l.Max), f.get(&l.Default)
		switch {
		case mx < 0 || def < 0:
			errs = append(errs, fmt.Errorf("limit %s: want 0 or more (%s)", f.name, f.flag))
		case mx > 0 && def > mx:
			errs = append(errs, fmt.Errorf("limit %s: the default %s is over the maximum %s (%s)", f.name, f.show(def), f.show(mx), f.flag))
		case (mx > 0 || def > 0) && !slices.Contains(enforced, f.name):
			errs = append(errs, fmt.Errorf("limit %s: the %s rung does not enforce it, so a bound would bound nothing: drop %s", f.name, rung, f.flag))
		}
	}
	return errors.Join(errs...)
}

// cgroupBound names the limits with a maximum that cgroups enforce.
func (l Limits) cgroupBound() []string {
	var out []string
	for _, f := range limitFields {
		if f.cgroup && f.get(&l.Max) > 0 {
			out = append(out, f.name)
		}
	}
	return out
}

// apply bounds what a client asked for (asked) by the pool's limits: it
// returns the values the sandbox gets, notes for its isolation report
// saying which came from the pool, or an error naming the first limit over
// its maximum and what to do.
func (l Limits) apply(asked wire.LimitValues, cgroup string) (wire.LimitValues, []string, error) {
	if cgroup == "off" {
		if bound := l.cgroupBound(); len(bound) > 0 {
			return asked, nil, fmt.Errorf("limits.cgroup off: this sandbox pool bounds %s, which its sandboxes enforce with cgroups: drop environment.sandbox.cgroup: off (auto is the default)", strings.Join(bound, ", "))
		}
	}
	got := asked
	var notes []string
	for _, f := range limitFields {
		v, mx, def := f.get(&asked), f.get(&l.Max), f.get(&l.Default)
		switch {
		case v < 0:
			return asked, nil, fmt.Errorf("limits.%s %s: want 0 or more (%s)", f.name, f.show(v), f.spec)
		case mx > 0 && v > mx:
			return asked, nil, fmt.Errorf("limits.%s %s is over this sandbox pool's maximum of %s (evalsid sandboxd %s): ask for %s or less in %s, or leave it unset for the pool's default", f.name, f.show(v), f.show(mx), f.flag, f.show(mx), f.spec)
		case v > 0:
			continue
		case def > 0:
			f.set(&got, def)
			notes = append(notes, fmt.Sprintf("%s=%s: the sandbox pool's default (the run set none)", f.name, f.show(def)))
		case mx > 0:
			if f.name == "command_timeout" && mx > float64(sandbox.DefaultCommandTimeout) {
				continue // the rung's own default, within the max
			}
			f.set(&got, mx)
			notes = append(notes, fmt.Sprintf("%s=%s: the sandbox pool's maximum (the run set none)", f.name, f.show(mx)))
		}
	}
	return got, notes, nil
}

// execTimeout bounds one command's own timeout by the pool's maximum
// command timeout; zero stays zero (the sandbox's command_timeout, which
// create bounded, applies).
func (l Limits) execTimeout(d time.Duration) time.Duration {
	if mx := l.Max.CommandTimeout; mx > 0 && d > mx {
		return mx
	}
	return d
}

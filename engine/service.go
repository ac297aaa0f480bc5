package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"evals.si/sandbox"
	"evals.si/spec"
)

// Docker's HEALTHCHECK defaults, which a healthcheck's zero fields take.
const (
	defaultHealthInterval      = 30 * time.Second
	defaultHealthTimeout       = 30 * time.Second
	defaultHealthStartInterval = 5 * time.Second
	defaultHealthRetries       = 3
)

// healthOutputLimit is how much of a check's output is kept, as Docker
// keeps 4 KiB of each probe's.
const healthOutputLimit = 4 << 10

// serviceExitPoll is how often, while waiting between checks, the
// service is looked at to see whether it exited: its exit ends the wait
// at once rather than after a 30s interval.
const serviceExitPoll = 250 * time.Millisecond

// clock is the time a healthcheck waits on: real time, or a test's.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// serviceStarter is the part of a sandbox that starts a service and runs
// its healthcheck.
type serviceStarter interface {
	Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error)
}

// startService starts env's service in sb, as a container's main process
// is started, and waits until its healthcheck passes (Docker's semantics,
// see waitHealthy); without a healthcheck it only starts it. logf records
// what happened in the trial's log. Every failure is the environment's,
// never the agent's (nothing of the agent's has run): an infrastructure
// error, kind "service", not retried when the rung cannot run services.
func startService(ctx context.Context, sb serviceStarter, env *spec.Environment, workdir string, clk clock, logf func(string)) error {
	// Without a service the healthcheck still runs, as Docker runs it
	// against whatever the container's main process is.
	exited := func() (int, bool) { return 0, false }
	output := func() []byte { return nil }
	if svc := env.Service; svc != nil && len(svc.Command) > 0 {
		user := svc.User
		if user == "" {
			user = env.User
		}
		dir := svc.Workdir
		if dir == "" {
			dir = workdir
		}
		s, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: svc.Command, User: user, Workdir: dir})
		if err != nil {
			err = &kindError{kind: "service", err: fmt.Errorf("starting the task's service %q as %s: %w", svc.Command, userName(user), err)}
			if errors.Is(err, errors.ErrUnsupported) {
				// The rung does not change between attempts.
				return &NonRetryable{Err: fmt.Errorf("this sandbox's rung cannot run the task's service (environment.service): use a rung that can (bwrap, landlock, docker or host): %w", err)}
			}
			return err
		}
		exited, output = s.Exited, s.Output
		logf(fmt.Sprintf("service started: %q as %s in %s", svc.Command, userName(user), dir))
	}
	hc := env.Healthcheck
	if hc == nil || len(hc.Command) == 0 {
		return nil
	}
	checkUser := hc.User
	if checkUser == "" {
		checkUser = env.User
	}
	probe := func(ctx context.Context, timeout time.Duration) (bool, string, error) {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: hc.Command, User: checkUser, Timeout: timeout, OutputLimit: healthOutputLimit})
		if err != nil {
			return false, "", err
		}
		out := strings.TrimSpace(string(res.Stdout) + "\n" + string(res.Stderr))
		switch {
		case res.TimedOut:
			return false, fmt.Sprintf("timed out after %s; output: %s", timeout, orNone(out)), nil
		case res.ExitCode != 0:
			return false, fmt.Sprintf("exit %d; output: %s", res.ExitCode, orNone(out)), nil
		}
		return true, out, nil
	}
	n, err := waitHealthy(ctx, healthParams(hc), clk, probe, exited)
	if err != nil {
		var he *healthError
		if errors.As(err, &he) {
			he.command, he.serviceOutput = hc.Command, tailText(output(), 2000)
		}
		return &kindError{kind: "service", err: err}
	}
	logf(fmt.Sprintf("service healthy after %d checks", n))
	return nil
}

// healthTiming is a healthcheck's timing, defaults applied.
type healthTiming struct {
	interval, timeout, startPeriod, startInterval time.Duration
	retries                                       int
}

func healthParams(hc *spec.Healthcheck) healthTiming {
	or := func(d spec.Duration, def time.Duration) time.Duration {
		if d.D() > 0 {
			return d.D()
		}
		return def
	}
	h := healthTiming{
		interval:      or(hc.Interval, defaultHealthInterval),
		timeout:       or(hc.Timeout, defaultHealthTimeout),
		startPeriod:   hc.StartPeriod.D(),
		startInterval: or(hc.StartInterval, defaultHealthStartInterval),
		retries:       hc.Retries,
	}
	if h.retries <= 0 {
		h.retries = defaultHealthRetries
	}
	return h
}

// healthError is a service that never became healthy.
type healthError struct {
	command       []string
	checks        int
	lastOutput    string
	exited        bool
	exitCode      int
	serviceOutput string
	retries       int
}

func (e *healthError) Error() string {
	if e.exited {
		return fmt.Sprintf("the task's service exited with code %d before its healthcheck passed (after %d checks); service output: %s", e.exitCode, e.checks, orNone(e.serviceOutput))
	}
	return fmt.Sprintf("the task's healthcheck %q failed %d times in a row (%d checks in all); last check: %s; service output: %s",
		e.command, e.retries, e.checks, e.lastOutput, orNone(e.serviceOutput))
}

// waitHealthy runs probe as Docker runs a HEALTHCHECK: the first check one
// interval after the start (start_interval while in the start period,
// interval after it), the next one that long after each check ends, each
// bounded by timeout. During the start period failures do not count; a
// pass at any time ends the wait. retries consecutive counted failures, or
// the service exiting (exited), fail it. It returns the number of checks
// run. A probe error (the sandbox could not run the check) ends it at once.
func waitHealthy(ctx context.Context, h healthTiming, clk clock, probe func(context.Context, time.Duration) (bool, string, error), exited func() (int, bool)) (int, error) {
	start := clk.Now()
	checks, failures := 0, 0
	last := ""
	for {
		wait := h.interval
		if clk.Now().Sub(start) < h.startPeriod {
			wait = h.startInterval
		}
		if err := sleepWatching(ctx, clk, wait, exited); err != nil {
			if code, ok := exited(); ok {
				return checks, &healthError{checks: checks, exited: true, exitCode: code, lastOutput: last}
			}
			return checks, err
		}
		ok, out, err := probe(ctx, h.timeout)
		checks++
		if err != nil {
			if ctx.Err() != nil {
				return checks, ctx.Err()
			}
			return checks, fmt.Errorf("running the task's healthcheck: %w", err)
		}
		if ok {
			return checks, nil
		}
		last = out
		if code, gone := exited(); gone {
			return checks, &healthError{checks: checks, exited: true, exitCode: code, lastOutput: last}
		}
		// In the start period a failure does not count (Docker measures
		// the period from the start to the check's end).
		if clk.Now().Sub(start) >= h.startPeriod {
			failures++
		}
		if failures >= h.retries {
			return checks, &healthError{checks: checks, lastOutput: last, retries: h.retries}
		}
	}
}

// errServiceExited ends a wait early: the service is gone.
var errServiceExited = errors.New("the service exited")

// sleepWatching waits d on clk, ending early with errServiceExited when
// exited reports the service gone, or with ctx's error.
func sleepWatching(ctx context.Context, clk clock, d time.Duration, exited func() (int, bool)) error {
	end := clk.Now().Add(d)
	for {
		if _, gone := exited(); gone {
			return errServiceExited
		}
		left := end.Sub(clk.Now())
		if left <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(min(left, serviceExitPoll)):
		}
	}
}

// userName names the user a request runs as, for logs.
func userName(user string) string {
	if user == "" {
		return "the sandbox's default user (the image's, else root)"
	}
	return user
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}

// tailText is the last n bytes of b, as valid text.
func tailText(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD")
}

package landlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
)

// StartService starts req as a service: a launcher like a command's, in a
// PID namespace of its own below the holder, so no command's sweep reaches
// it (each sweeps its own namespace) and its own leftovers die only when it
// ends (its launcher then sweeps, as Docker stops a container whose main
// process exits) or the sandbox closes. Limits, seccomp, Landlock and the
// user apply as to a command; it has a cgroup of its own, with the
// sandbox's limits, removed when it ends.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("landlock service: empty argv")
	}
	sp := s.commandSpec(sandbox.ExecRequest{Argv: req.Argv, Env: req.Env, Workdir: req.Workdir, User: req.User})
	sp.Service = true
	cg, err := s.newCgroup()
	if err != nil {
		return nil, fmt.Errorf("landlock service: %w", err)
	}
	svc := &service{ServiceState: &sandbox.ServiceState{}, done: make(chan struct{})}
	l, err := s.launch(ctx, sp, cg, nil, svc.ServiceState, svc.ServiceState)
	if err != nil {
		removeCgroup(cg)
		return nil, fmt.Errorf("landlock service %q: %w", req.Argv, err)
	}
	svc.l = l
	// Until the command is exec'd, a failure (an unknown user, a missing
	// workdir) is StartService's error.
	if err := waitStarted(ctx, l); err != nil {
		l.signal(syscall.SIGKILL)
		l.finishOutput(10 * time.Second)
		l.waitExit(10 * time.Second)
		removeCgroup(cg)
		return nil, fmt.Errorf("landlock service %q: %w", req.Argv, err)
	}
	s.holdMu.Lock()
	if s.holder == nil {
		// Closed meanwhile: the holder and this service are gone.
		s.holdMu.Unlock()
		l.signal(syscall.SIGKILL)
		go svc.wait(cg)
		return nil, fmt.Errorf("landlock service %q: the sandbox was closed while it started", req.Argv)
	}
	s.services = append(s.services, svc)
	s.holdMu.Unlock()
	go svc.wait(cg)
	return svc, nil
}

// waitStarted waits for a service's launcher to exec the command, or to
// fail before.
func waitStarted(ctx context.Context, l *launched) error {
	select {
	case <-l.started:
		return nil
	case <-l.ended:
		select {
		case <-l.started:
			return nil // it started, and has already ended: wait reports it
		default:
		}
		st, ok := <-l.status
		switch {
		case !ok:
			return errors.New("the launcher ended without a status")
		case st.SetupErr != "":
			return fmt.Errorf("setting up the sandbox: %s", st.SetupErr)
		}
		return fmt.Errorf("the launcher ended (exit %d) before the command started", st.ExitCode)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// service is a running service.
type service struct {
	*sandbox.ServiceState
	l    *launched
	done chan struct{} // closed once it ended and its cgroup is gone

	mu  sync.Mutex
	err string // a launcher setup failure, kept in Output
}

func (v *service) wait(cg *limits.Cgroup) {
	st, ok := <-v.l.status
	v.l.finishOutput(10 * time.Second)
	v.l.waitExit(10 * time.Second)
	removeCgroup(cg)
	code := st.ExitCode
	switch {
	case !ok:
		// The holder died (Close) before the launcher could report.
		code = 128 + int(syscall.SIGKILL)
	case st.SetupErr != "":
		code = 125
		v.mu.Lock()
		v.err = st.SetupErr
		v.mu.Unlock()
	}
	v.SetExited(code)
	close(v.done)
}

// kill stops the service (Close and Snapshot kill the holder anyway; this
// makes the launcher sweep and report first when it still can).
func (v *service) kill() {
	select {
	case <-v.done:
	default:
		v.l.signal(syscall.SIGTERM)
	}
}

func (v *service) Output() []byte {
	v.mu.Lock()
	msg := v.err
	v.mu.Unlock()
	b := v.ServiceState.Output()
	if msg != "" {
		b = append(b, "\nlandlock service: setting up the sandbox: "+msg+"\n"...)
	}
	return b
}

func removeCgroup(cg *limits.Cgroup) {
	if cg != nil {
		cg.Kill()
		cg.Remove()
	}
}

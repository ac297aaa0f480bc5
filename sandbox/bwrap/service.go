package bwrap

import (
	"context"
	"errors"
	"fmt"
	"math"
	"syscall"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
	"evals.si/sandbox/limits"
)

// StartService starts req as the sandbox's long-running process: forked by
// the exec server like a command (its own session, the seccomp filter, the
// rlimits and, with cgroups, a cgroup of its own with the sandbox's
// limits), through the init helper, which makes it a child subreaper, and
// spared with all its descendants (the daemons it detaches included) by
// the sweep that ends each command's leftovers, so it runs until it exits
// (then what it left is killed, as a container's processes end with its
// main process) or the sandbox closes.
// It lives in the exec server it started in: a server restarted later
// (SetPolicy widening the network) ends it.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (_ sandbox.Service, err error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("starting a service: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	defer s.life.End()
	env, err := s.commandEnv(req)
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	srv, err := s.server(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	defer s.release(srv)

	var cg *limits.Cgroup
	if s.cgroups != nil {
		if cg, err = s.cgroups.New(fmt.Sprintf("evalsi-%s-svc-%d", s.id, s.seq.Add(1)), s.cfg.Limits); err != nil {
			return nil, fmt.Errorf("starting a service: %w", err)
		}
		defer func() {
			if err != nil {
				cg.Remove()
			}
		}()
	}
	argv, env := s.command(req.Argv, env, true)
	// No output limit at the server: the host keeps the tail.
	m := execproto.ExecMsg{Argv: argv, Env: env, Dir: sandbox.InSandboxPath(s.workdir, req.Workdir), Limit: math.MaxInt, Join: cg != nil, Service: true}
	s.setUser(&m, req)
	state := &sandbox.ServiceState{}
	c, err := srv.startService(m, state)
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	fail := func(err error) (sandbox.Service, error) {
		srv.send(execproto.FrameKill, c.id, nil)
		if cg != nil {
			s.killCommands(srv, cg)
		}
		srv.forget(c)
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	// As in Exec: with cgroups the forking thread (v1) or the whole
	// server (v2, moved back once the service has started) joins the
	// service's cgroup first.
	var moveBack func()
	defer func() {
		if moveBack != nil {
			moveBack()
		}
	}()
	var early *execproto.ExitMsg
	for started := false; !started; {
		select {
		case tid := <-c.join:
			back, err := s.joinCgroup(srv, cg, tid)
			if err != nil {
				return fail(err)
			}
			moveBack = back
			if err := srv.send(execproto.FrameGo, c.id, nil); err != nil {
				return fail(err)
			}
		case <-c.started:
			started = true
		case ex := <-c.exit:
			// It could not be started (or exited at once: frames are
			// ordered, so it has started by now if it ever did).
			if ex.Setup != "" {
				srv.forget(c)
				return nil, fmt.Errorf("starting a service: %s", ex.Setup)
			}
			early, started = &ex, true
		case <-srv.dead:
			return nil, fmt.Errorf("starting a service: %w", srv.deadErr)
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	if moveBack != nil {
		moveBack()
		moveBack = nil
	}
	go s.watchService(srv, c, cg, state, early)
	return state, nil
}

// watchService records the service's end: its exit code, or SIGKILL's
// when the sandbox's server ended with it still running (Close).
func (s *Sandbox) watchService(srv *execServer, c *call, cg *limits.Cgroup, state *sandbox.ServiceState, early *execproto.ExitMsg) {
	code := 128 + int(syscall.SIGKILL)
	if early != nil {
		code = early.Code
	} else {
		select {
		case ex := <-c.exit:
			code = ex.Code
		case <-srv.dead:
		}
	}
	select {
	case <-c.done:
	case <-srv.dead:
	}
	srv.forget(c)
	if cg != nil {
		s.killCommands(srv, cg)
		cg.Remove()
	}
	state.SetExited(code)
}

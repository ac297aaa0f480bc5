package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/limits"
)

// checkUser accepts an ExecRequest.User only when it names the engine's
// own user (and, with a group, its own group): the host rung has no users
// of its own and never switches to another.
func checkUser(spec string) error {
	if spec == "" {
		return nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	uid, gid := strconv.Itoa(os.Geteuid()), strconv.Itoa(os.Getegid())
	ok := name == uid
	if u, err := user.LookupId(uid); err == nil && name == u.Username {
		ok = true
	}
	if hasGroup {
		gok := group == gid
		if g, err := user.LookupGroupId(gid); err == nil && group == g.Name {
			gok = true
		}
		ok = ok && gok
	}
	if !ok {
		return fmt.Errorf("user %q: the host rung has no users of its own: commands run as the engine's user (uid %s, gid %s) and cannot switch to another; use a sandboxing rung (bwrap, landlock, docker)", spec, uid, gid)
	}
	return nil
}

// service is a process StartService started.
type service struct {
	*sandbox.ServiceState
	pgid int
	cg   *limits.Cgroup
}

// kill ends the service's process group and cgroup.
func (svc *service) kill() {
	syscall.Kill(-svc.pgid, syscall.SIGKILL)
	if svc.cg != nil {
		svc.cg.Kill()
	}
}

// StartService starts req in a process group (and, with cgroups, a cgroup)
// of its own, which no command's end touches; the group is killed when
// its first process exits, as a container's processes end with its main
// process, or at Close. With no cgroup, what it starts with setsid
// escapes that kill, as a command's does (the report says so).
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (_ sandbox.Service, err error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("starting a service: empty argv")
	}
	if err := s.life.Begin(); err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	defer s.life.End()
	if err := checkUser(req.User); err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	svc := &service{ServiceState: &sandbox.ServiceState{}}
	if s.cgroups != nil {
		if svc.cg, err = s.cgroups.New(fmt.Sprintf("evalsi-host-%s-svc-%d", s.id, s.seq.Add(1)), s.cfg.Limits); err != nil {
			return nil, fmt.Errorf("starting a service: %w", err)
		}
		defer func() {
			if err != nil {
				svc.cg.Remove()
			}
		}()
	}
	cmd, err := s.command(req, svc.cg)
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	// One pipe for both streams keeps the output's order.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	s.svcMu.Lock()
	defer s.svcMu.Unlock()
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting a service: %w", err)
	}
	w.Close()
	svc.pgid = cmd.Process.Pid
	s.services = append(s.services, svc)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(svc.ServiceState, r)
	}()
	go func() {
		code := 0
		var ee *exec.ExitError
		switch err := cmd.Wait(); {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		default:
			code = -1
		}
		svc.kill()
		// What escaped the group may hold the pipe: read what is there,
		// not what it may write later.
		r.SetReadDeadline(time.Now().Add(2 * time.Second))
		<-copied
		r.Close()
		if svc.cg != nil {
			svc.cg.Remove()
		}
		svc.SetExited(code)
	}()
	return svc, nil
}

// stopServices kills the running services and waits for their ends to be
// recorded.
func (s *Sandbox) stopServices() {
	s.svcMu.Lock()
	svcs := s.services
	s.services = nil
	s.svcMu.Unlock()
	for _, svc := range svcs {
		svc.kill()
	}
	for _, svc := range svcs {
		<-svc.Done()
	}
}

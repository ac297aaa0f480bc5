package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

// A service is an exec like a command's that nothing waits for and that
// the sweep after each command spares (exec.go's sweepScript), with all
// its descendants.
//
// Its leader, the exec's process, is a child subreaper: the engine binary
// bound in (containerHelper) sets PR_SET_CHILD_SUBREAPER, which execve
// keeps, and execs the wrapper below, which execs the service. So what the
// service starts stays its descendant however it detaches: a daemon's
// double fork and setsid reparent the daemon to the leader, not to the
// keeper, as under Docker the daemon lives on with the container. A
// command cannot get among them: a process's parent is fixed at fork, an
// orphan goes to its nearest subreaper ancestor, and no command is a
// service's descendant (an exec's parent is outside the container). The
// leader is known by its pid, which the wrapper prints before it execs the
// service, and its start time, which tells the leader from a later
// process given the same pid once the leader has died. The leader's own
// exit ends the service, as a container's main process ends the
// container: what it left is reparented to the keeper and killed by the
// next sweep. A command running as the service's user can still ptrace it
// (Docker's profile allows ptrace within the container) and have it fork:
// that is the service acting, which no rung can tell from its own
// behaviour.

// helperSubreaper is the engine binary's helper that makes itself a child
// subreaper and execs its arguments (an absolute path first).
const helperSubreaper = "evalsi-docker-subreaper"

func init() { reexec.RegisterEarly(helperSubreaper, subreaperMain) }

func subreaperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "evalsi docker subreaper: usage: PATH ARGS...")
		return 125
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "evalsi docker subreaper: making the service a child subreaper:", err)
		return 125
	}
	err := unix.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "evalsi docker subreaper: executing %s: %v\n", args[0], err)
	return 126
}

// serviceWrapper prints "PID STARTTIME" (from /proc/self/stat; STARTTIME
// is field 22, the 20th after the command name) and execs the service
// ($0 and $@). Its own command name is sh's, so the first line of stat is
// all of it. The service's stderr is its stdout: Docker copies two pipes
// in two goroutines, which would reorder the interleaved output.
const serviceWrapper = `f() { set -- ${1##*) }; echo "$$ ${20}"; }; read -r l < /proc/$$/stat && f "$l" && exec "$0" "$@" 2>&1; exit 125`

// serviceStartTimeout bounds the wait for the wrapper's first line.
const serviceStartTimeout = time.Minute

// StartService runs req as a service: as req.User (else the sandbox's
// user), in req.Workdir with req.Env over the container's environment,
// stdin /dev/null, until it exits or the sandbox closes. ctx bounds only
// the start.
func (s *Sandbox) StartService(ctx context.Context, req sandbox.ExecRequest) (sandbox.Service, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("starting a service in docker sandbox %s: empty argv", short(s.id))
	}
	wd := s.cfg.Workdir
	if req.Workdir != "" {
		wd = s.abs(req.Workdir)
	}
	user := s.execUser(req.User)
	// No command runs, nor its sweep, until the service is known.
	s.execs.Lock()
	defer s.execs.Unlock()

	// The helper's variable reaches it alone: it unsets it before it
	// execs the wrapper.
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		Cmd: append([]string{containerHelper, "/bin/sh", "-c", serviceWrapper}, req.Argv...),
		Env: append(envList(req.Env), reexec.Env+"="+helperSubreaper), WorkingDir: wd, User: user,
		AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("starting a service in docker sandbox %s: %w", short(s.id), err)
	}
	// The stream outlives the request: it is the service's output.
	hj, err := s.cli.ContainerExecAttach(context.WithoutCancel(ctx), created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("starting a service in docker sandbox %s: attaching: %w", short(s.id), err)
	}
	svc := &service{sb: s, execID: created.ID, hj: hj, out: &sandbox.ServiceState{}, ended: make(chan struct{})}
	first := &firstLine{line: make(chan string, 1), rest: svc.out}
	go svc.watch(first)

	timer := time.NewTimer(serviceStartTimeout)
	defer timer.Stop()
	var line string
	select {
	case line = <-first.line:
	case <-svc.ended:
		line = <-first.line // sent before the end
	case <-ctx.Done():
		// Unregistered, what the wrapper started dies in the next sweep.
		hj.Close()
		return nil, fmt.Errorf("starting a service in docker sandbox %s: %w", short(s.id), ctx.Err())
	case <-timer.C:
		hj.Close()
		return nil, fmt.Errorf("starting a service in docker sandbox %s: its wrapper printed nothing in %s", short(s.id), serviceStartTimeout)
	}
	pid, start, ok := parseServiceLine(line)
	if !ok {
		// The exec did not start (Docker's reason is on its stdout, the
		// first line), or the helper or the wrapper failed (a helper that
		// cannot run in the image: a dynamically linked build): an error,
		// with what was said.
		hj.Close()
		code := -1
		if in, err := s.cli.ContainerExecInspect(context.WithoutCancel(ctx), created.ID); err == nil {
			code = in.ExitCode
		}
		msg := strings.TrimSpace(line + "\n" + string(svc.out.Output()))
		return nil, fmt.Errorf("starting service %q as user %q in docker sandbox %s: exit %d: %s", req.Argv, user, short(s.id), code, msg)
	}
	svc.pid, svc.start = pid, start
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		hj.Close()
		return nil, fmt.Errorf("starting a service: docker sandbox %s is closed", short(s.id))
	}
	s.services = append(s.services, svc)
	return svc, nil
}

// parseServiceLine reads the wrapper's "PID STARTTIME".
func parseServiceLine(line string) (pid int, start string, ok bool) {
	p, st, found := strings.Cut(strings.TrimSpace(line), " ")
	if !found {
		return 0, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 1 {
		return 0, "", false
	}
	if _, err := strconv.ParseUint(st, 10, 64); err != nil {
		return 0, "", false
	}
	return pid, st, true
}

// serviceLeaders are the sweep's arguments: "PID:STARTTIME" of each
// service not known to have ended.
func (s *Sandbox) serviceLeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, svc := range s.services {
		if _, exited := svc.out.Exited(); !exited {
			out = append(out, strconv.Itoa(svc.pid)+":"+svc.start)
		}
	}
	return out
}

type service struct {
	sb     *Sandbox
	execID string
	hj     types.HijackedResponse
	// out keeps the output's tail and the leader's exit.
	out *sandbox.ServiceState
	// pid and start identify the leader (see above); set before the
	// service is shared.
	pid   int
	start string
	// ended is closed when the output stream has ended.
	ended chan struct{}
}

var _ sandbox.Service = (*service)(nil)

// watch copies the output until the stream ends, then records the exit.
func (v *service) watch(first *firstLine) {
	stdcopy.StdCopy(first, v.out, v.hj.Reader)
	first.end()
	close(v.ended)
	if in, err := v.sb.inspectExited(context.Background(), v.execID); err == nil && !in.Running {
		v.out.SetExited(in.ExitCode)
	}
}

// Exited reports the leader's exit. While the output is open (a child may
// hold it after the leader ended) Docker is asked; once it says the
// leader ended, what is left of the output in flight is waited for a
// little, so that Output then holds the end of it.
func (v *service) Exited() (int, bool) {
	if code, exited := v.out.Exited(); exited {
		return code, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := v.sb.cli.ContainerExecInspect(ctx, v.execID)
	if err != nil || in.Running {
		return 0, false
	}
	select {
	case <-v.ended:
	case <-time.After(outputDrain):
	}
	v.out.SetExited(in.ExitCode)
	return v.out.Exited()
}

// outputDrain bounds the wait for a service's output after its leader
// ended: a child it left may hold the output open for good.
const outputDrain = 2 * time.Second

// Output is the tail of the service's stdout and stderr, interleaved as
// Docker delivered them.
func (v *service) Output() []byte { return v.out.Output() }

// closed is called when the sandbox is removed, which kills the service.
func (v *service) closed() {
	v.out.SetExited(137)
	v.hj.Close()
}

// firstLine passes on what is written to it after the first line, which
// it sends on line (once; "" if the stream ends before a newline). Only
// stdcopy's goroutine writes to it.
type firstLine struct {
	line chan string
	rest io.Writer
	buf  []byte
	sent bool
}

// maxFirstLine bounds the first line: the wrapper's is short; anything
// longer is Docker's error or something else's, kept as output.
const maxFirstLine = 4096

func (f *firstLine) Write(p []byte) (int, error) {
	n := len(p)
	if !f.sent {
		switch i := bytes.IndexByte(p, '\n'); {
		case i >= 0:
			f.buf = append(f.buf, p[:i]...)
			p = p[i+1:]
		case len(f.buf)+len(p) <= maxFirstLine:
			f.buf = append(f.buf, p...)
			return n, nil
		}
		f.send()
	}
	f.rest.Write(p)
	return n, nil
}

func (f *firstLine) send() {
	if !f.sent {
		f.sent = true
		f.line <- string(f.buf)
	}
}

// end sends what there is if no line was sent.
func (f *firstLine) end() { f.send() }

package docker

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"evals.si/sandbox"
)

// pollEvery is how often a running exec is inspected once its output has
// not ended: daemons that keep the output open would otherwise hide the
// command's end.
const pollEvery = 20 * time.Millisecond

// Exec runs argv in the container.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	if err := s.usable(); err != nil {
		return res, err
	}
	if len(req.Argv) == 0 {
		return res, fmt.Errorf("docker exec: empty argv")
	}
	wd := s.cfg.Workdir
	if req.Workdir != "" {
		wd = s.abs(req.Workdir)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.cfg.CommandTimeout
	}
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	limit := req.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	user := s.execUser(req.User)
	s.execs.RLock()
	defer s.execs.RUnlock()
	oomBefore := s.oomKilled(ctx)
	pidsBefore := pidsMaxEvents(s.pidsEvents)

	start := time.Now()
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		Cmd: req.Argv, Env: envList(req.Env), WorkingDir: wd, User: user,
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return res, fmt.Errorf("docker exec in %s: %w", short(s.id), err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return res, fmt.Errorf("docker exec in %s: attaching: %w", short(s.id), err)
	}
	defer hj.Close()
	go func() {
		hj.Conn.Write(req.Stdin)
		hj.CloseWrite()
	}()
	// Gives req.Output the attached output live; stopped before Exec
	// returns, so the hook is never called after.
	out := sandbox.NewOutputStream(limit, req.Output)
	defer out.Stop()
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.Stdout(), out.Stderr(), hj.Reader)
		copied <- err
	}()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	ticker := time.NewTicker(pollEvery)
	defer ticker.Stop()
	outputDone := false
wait:
	for {
		select {
		case <-copied:
			outputDone = true
			break wait
		case <-ticker.C:
			in, err := s.cli.ContainerExecInspect(ctx, created.ID)
			if err == nil && !in.Running {
				break wait
			}
		case <-timer.C:
			res.TimedOut = true
			break wait
		case <-ctx.Done():
			s.sweep(context.WithoutCancel(ctx))
			return res, fmt.Errorf("docker exec in %s: %w", short(s.id), ctx.Err())
		}
	}
	// Kill what the command left running (and the command, on timeout).
	if err := s.sweep(ctx); err != nil {
		return res, err
	}
	if !outputDone {
		select {
		case <-copied:
		case <-time.After(10 * time.Second):
			return res, fmt.Errorf("docker exec in %s: output did not end after killing the command's processes", short(s.id))
		}
	}
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = out.Bytes()
	res.Truncated = out.Truncated()

	in, err := s.inspectExited(ctx, created.ID)
	if err != nil {
		return res, err
	}
	res.ExitCode = in.ExitCode
	if in.Pid == 0 && in.ExitCode == 126 {
		// Nothing ran: Docker could not start the process. A command that
		// is missing or not executable is the command's failure; a user
		// Docker cannot run as is the sandbox's.
		if err := s.checkUser(ctx, user); err != nil {
			return res, fmt.Errorf("docker exec in %s: %w", short(s.id), err)
		}
	}
	if n := pidsMaxEvents(s.pidsEvents) - pidsBefore; n > 0 {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "pids", Detail: fmt.Sprintf("%d fork(s) refused at the pids limit %d", n, s.pids)})
	}
	if s.disk != nil {
		full, err := s.disk.full()
		if err != nil {
			return res, fmt.Errorf("docker exec in %s: %w", short(s.id), err)
		}
		if full != "" {
			res.Denials = append(res.Denials, sandbox.Denial{Kind: "disk", Detail: full})
		}
	}
	if res.TimedOut {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "timeout", Detail: fmt.Sprintf("killed after %s", timeout)})
		if res.ExitCode == 0 {
			res.ExitCode = 137
		}
		return res, nil
	}
	// The signal may have hit a child of a shell, which then exits 128+25.
	if s.cfg.Limits.FileSizeMB > 0 && res.ExitCode == 128+25 {
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "fsize", Detail: fmt.Sprintf("file size limit %d MiB exceeded (SIGXFSZ)", s.cfg.Limits.FileSizeMB)})
	}
	if res.ExitCode == 137 && s.cfg.Limits.MemoryMB > 0 {
		// SIGKILL under a memory limit: the kernel's OOM killer, unless the
		// command killed itself. Docker's OOMKilled flag is sticky, so only a
		// change counts as confirmation.
		detail := fmt.Sprintf("killed (SIGKILL) under the %d MiB memory limit", s.cfg.Limits.MemoryMB)
		if !oomBefore && s.oomKilled(ctx) {
			detail += "; docker reports OOMKilled"
		}
		res.Denials = append(res.Denials, sandbox.Denial{Kind: "oom", Detail: detail})
	}
	return res, nil
}

func (s *Sandbox) oomKilled(ctx context.Context) bool {
	in, err := s.cli.ContainerInspect(ctx, s.id)
	return err == nil && in.State != nil && in.State.OOMKilled
}

// inspectExited waits briefly for docker to record the exec's exit.
func (s *Sandbox) inspectExited(ctx context.Context, execID string) (container.ExecInspect, error) {
	for i := 0; ; i++ {
		in, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return in, fmt.Errorf("docker exec in %s: inspecting: %w", short(s.id), err)
		}
		if !in.Running || i > 500 {
			return in, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepScript SIGKILLs every process but init (the keeper), itself and
// the services' leaders and their descendants (service.go), a few rounds
// over so that forks in flight are caught. Its arguments are the services
// as "PID:STARTTIME": a leader is spared while that pid is alive and
// started at that time. pstat reads a process's state, parent and start
// time from all of /proc/PID/stat: a command name may hold newlines and
// ") ", so everything up to the last ") " is dropped.
//
// Each round reads every process's parent once (snap), then keeps the
// leaders' descendants: a process whose parent is kept and no younger
// than it (a younger one has taken a dead parent's pid). The snapshot is
// read one process at a time, so a link may be stale: a parent that exited
// after its child was read, the child since reparented to the leader. So
// each process about to be killed is read again and kept if its parent is
// now a kept one (in pid order, parents mostly first). Processes that are
// gone make kill fail: that is expected. The keeper's sleep may die with
// the rest; the keeper starts another.
const sweepScript = `pstat() { l=; while IFS= read -r x; do l="$l $x"; done 2>/dev/null < "/proc/$1/stat"; set -- ${l##*) }; st=$1 ppid=$2 start=${20}; }
num() { case "$1" in ""|*[!0-9]*) return 1 ;; esac; }
kept() { case "$keep" in *" $1 "*) return 0 ;; esac; return 1; }
# child PPID START: PPID is kept and no younger than START.
child() { kept "$1" && eval "ps=\$s_$1" && [ "$ps" -le "$2" ]; }
leaders=" "
for a; do
  p=${a%%:*}; num "$p" || continue
  pstat "$p"
  [ "$st" != Z ] && num "$start" && [ "$start" = "${a#*:}" ] && leaders="$leaders$p " && eval "s_$p=$start"
done
nl='
'
for r in 1 2 3; do
  snap=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$p" in 1|"$$") continue ;; esac
    pstat "$p"
    num "$p" && num "$ppid" && num "$start" && snap="$snap$p $ppid $start$nl"
  done
  keep=$leaders
  more=1
  while [ $more = 1 ]; do
    more=0
    IFS=$nl
    for e in $snap; do
      IFS=' '; set -- $e
      kept "$1" && continue
      child "$2" "$3" || continue
      keep="$keep$1 "; eval "s_$1=$3"; more=1
    done
    IFS=' '
  done
  IFS=$nl
  for e in $snap; do
    IFS=' '; set -- $e
    kept "$1" && continue
    p=$1
    pstat "$p"
    if num "$ppid" && num "$start" && child "$ppid" "$start"; then
      keep="$keep$p "; eval "s_$p=$start"; continue
    fi
    kill -9 "$p" 2>/dev/null
  done
  IFS=' '
done
exit 0`

func (s *Sandbox) sweep(ctx context.Context) error {
	argv := append([]string{"/bin/sh", "-c", sweepScript, "sweep"}, s.serviceLeaders()...)
	var lastErr error
	// Under a fork bomb the pids limit can refuse the sweep's own exec for
	// a while; the bomb's shells give up on failed forks, so retry.
	for attempt := 0; attempt < 50; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		// As root, whose CAP_KILL (in Docker's default set) reaches the
		// processes of every user commands ran as.
		out, code, err := s.run(ctx, argv)
		if err == nil && code == 0 {
			return nil
		}
		lastErr = fmt.Errorf("exit %d: %v %s", code, err, out)
	}
	return fmt.Errorf("docker exec in %s: killing leftover processes: %w", short(s.id), lastErr)
}

// execUser is the user a request runs as: its own, else the sandbox's.
func (s *Sandbox) execUser(user string) string {
	if user != "" {
		return user
	}
	return s.user
}

// checkUser returns Docker's reason when it cannot start a process as
// user at all (no such user or group, a uid outside the container's
// mapping), nil when it can.
func (s *Sandbox) checkUser(ctx context.Context, user string) error {
	out, in, err := s.helper(ctx, user, []string{"/bin/sh", "-c", "exit 0"})
	if err != nil {
		return fmt.Errorf("checking user %q: %w", user, err)
	}
	if in.Pid == 0 && in.ExitCode != 0 {
		return fmt.Errorf("cannot run as user %q: %s", user, strings.TrimSpace(out))
	}
	return nil
}

// run executes a helper command as root and returns its combined output
// and exit code.
func (s *Sandbox) run(ctx context.Context, argv []string) (string, int, error) {
	return s.runAs(ctx, "0", argv)
}

// runAs executes a helper command as user.
func (s *Sandbox) runAs(ctx context.Context, user string, argv []string) (string, int, error) {
	out, in, err := s.helper(ctx, user, argv)
	if err != nil {
		return out, -1, err
	}
	return out, in.ExitCode, nil
}

// helper executes a helper command as user in / and returns its combined
// output and how it ended.
func (s *Sandbox) helper(ctx context.Context, user string, argv []string) (string, container.ExecInspect, error) {
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		Cmd: argv, User: user, WorkingDir: "/", AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return "", container.ExecInspect{}, err
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", container.ExecInspect{}, err
	}
	defer hj.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, hj.Reader); err != nil {
		return out.String(), container.ExecInspect{}, err
	}
	in, err := s.inspectExited(ctx, created.ID)
	return out.String(), in, err
}

package bwrap

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
	"evals.si/sandbox/limits"
	"evals.si/sandbox/reexec"
)

// serverPidsMargin is what RLIMIT_NPROC (non-root engines) is raised by for
// the exec server's own threads, which count against it too.
const serverPidsMargin = 32

// execServer is the host's end of one sandbox's exec server: the bwrap
// process whose PID 1 is the server, and the calls in flight.
type execServer struct {
	cmd *exec.Cmd
	pid int // host pid of the server (PID 1 inside)
	// proxy is the host socket the server forwards 127.0.0.1:3128 to ("":
	// none, network deny).
	proxy string
	cg    *limits.Cgroup // the server's own cgroup (cgroup v2 only)

	wmu sync.Mutex
	w   *os.File

	mu      sync.Mutex
	calls   map[uint32]*call
	next    uint32
	active  int
	retired bool
	// armed is the forking thread readied for the next command, already
	// in that command's cgroup (cgroup v1; nil: none ready); arming says
	// one is being readied.
	armed  *armSlot
	arming bool

	// ready is closed when the server serves (bwrap has set up).
	ready   chan struct{}
	dead    chan struct{}
	deadErr error
	stderr  *sandbox.CappedBuffer
	waitc   chan error
}

// call is one command's state on the host.
type call struct {
	id uint32
	// out keeps a command's stdout and stderr and gives them to its
	// request's Output hook as they come (nil for other calls).
	out     *sandbox.OutputStream
	join    chan int
	started chan struct{}
	exit    chan execproto.ExitMsg
	done    chan execproto.DoneMsg
	// file answers a file operation's call.
	file chan execproto.FileResult
	// service, for a service's call, takes its output (both streams).
	service *sandbox.ServiceState
}

// serverArgs builds the sandbox's bwrap invocation; order matters: the
// root first, then mounts on top of it. src.proxy is the host socket of the
// egress proxy ("" for none).
func (s *Sandbox) serverArgs(src sources) []string {
	var a []string
	if s.inNS {
		// bwrap runs as root of the sandbox's user namespace (started by
		// userns.Start) and makes the other namespaces in it; one of its
		// own would map a single id.
		a = append(a, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
	} else {
		a = append(a, "--unshare-all")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL")
	if s.inNS {
		for _, c := range sandbox.ContainerCapabilities {
			a = append(a, "--cap-add", c)
		}
		// For the server alone, to read the memory of commands whose
		// calls the seccomp filter passes up; it drops it from what its
		// commands can get before it serves (execproto).
		a = append(a, "--cap-add", "CAP_SYS_PTRACE")
	}
	a = append(a, "--hostname", s.id, "--as-pid-1")
	if !s.inNS {
		// bwrap's own namespace maps the one id it runs as: to the
		// sandbox's user, root (0) unless Config.User says otherwise, as
		// the report says; without --uid it would keep the engine's uid.
		a = append(a, "--uid", strconv.Itoa(s.uid), "--gid", strconv.Itoa(s.gid))
	}
	merged := src.root
	if s.cfg.ReadOnlyRoot {
		a = append(a, "--ro-bind", merged, "/")
	} else {
		a = append(a, "--bind", merged, "/")
	}
	if s.noImage {
		for _, d := range hostSystemDirs {
			if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
				a = append(a, "--ro-bind", "/"+d, "/"+d)
			}
		}
		for _, f := range hiddenHostFiles {
			if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
				a = append(a, "--ro-bind", src.empty, f)
			}
		}
		for _, d := range hiddenHostDirs {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				// Read-only: a cover, not a place to write past disk_mb.
				a = append(a, "--tmpfs", d, "--remount-ro", d)
			}
		}
	}
	a = append(a, s.etcMounts(src.etc)...)
	a = append(a, "--proc", "/proc")
	a = append(a, s.procMasks(src.empty)...)
	a = append(a, "--dev", "/dev", "--bind", src.tmp, "/tmp")
	if src.shm != "" {
		// Under disk_mb nothing writable may lie outside the bound:
		// /dev/shm is a directory on it and the rest of /dev read-only.
		a = append(a, "--bind", src.shm, "/dev/shm", "--remount-ro", "/dev")
	}
	if s.cfg.ReadOnlyRoot {
		a = append(a, "--bind", filepath.Join(merged, s.workdir), s.workdir)
	}
	a = append(a, "--ro-bind", src.helper, sandboxHelper)
	if src.proxy != "" {
		a = append(a, "--bind", src.proxy, sandboxProxySock)
	}
	// One P: the server mostly hands work between goroutines, which is
	// cheaper on one thread than across several.
	a = append(a, "--clearenv", "--setenv", reexec.Env, execproto.Helper, "--setenv", "GOMAXPROCS", "1",
		"--chdir", s.workdir, "--json-status-fd", "3", "--", sandboxHelper)
	if src.proxy != "" {
		a = append(a, "--forward", sandboxProxySock, proxyPort)
	}
	// Not bwrap's --seccomp: the server installs the filter on each
	// command's forking thread with a listener of its own, so what it
	// refuses is recorded per command (execproto/notify.go); the server
	// itself, our code, runs without it.
	a = append(a, "--seccomp", hex.EncodeToString(s.seccomp))
	// The server sets these on itself before it reads a request, and
	// commands inherit them; not the address space, which the init helper
	// sets per command (a Go runtime cannot run under it).
	var rls []limits.Rlimit
	for _, rl := range s.rlimits.Outer {
		if rl.Name != "as" {
			rls = append(rls, rl)
		}
	}
	if s.nproc {
		// The server's own threads count against RLIMIT_NPROC too.
		rls = append(rls, limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc + serverPidsMargin})
	}
	for _, rl := range rls {
		if res, err := rl.Resource(); err == nil {
			a = append(a, "--rlimit", fmt.Sprintf("%d=%d", res, rl.Value))
		}
	}
	return a
}

// procMasks hides what Docker masks under /proc (an empty file or a
// read-only empty tmpfs over it) and makes read-only what it does: global
// sysctls in /proc/sys above all (kernel.core_pattern runs a program as
// the host's root; the user namespace already refuses those, this also
// covers the namespaced ones, as Docker does). A bind source is a host
// path, so these come from the host's /proc, which shows the same: a
// sysctl file reads and writes the namespaces of the process using it.
// (bwrap's own cover of /proc/sys skips directories it finds
// unwritable by access(2), which /proc/sys is.) Paths this kernel lacks
// need nothing, and bwrap could not create them in /proc. /sys is not
// mounted at all.
func (s *Sandbox) procMasks(empty string) []string {
	var a []string
	for _, p := range procPaths(sandbox.MaskedPaths) {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			a = append(a, "--tmpfs", p, "--remount-ro", p)
		default:
			a = append(a, "--ro-bind", empty, p)
		}
	}
	for _, p := range procPaths(sandbox.ReadOnlyPaths) {
		if _, err := os.Stat(p); err == nil {
			a = append(a, "--ro-bind", p, p)
		}
	}
	return a
}

// startServer starts the sandbox's bwrap with the exec server as PID 1 and
// returns once its host pid is known; requests sent meanwhile wait in the
// pipe until it serves.
func (s *Sandbox) startServer(ctx context.Context, proxy string) (_ *execServer, err error) {
	srv := &execServer{proxy: proxy, calls: map[uint32]*call{}, ready: make(chan struct{}), dead: make(chan struct{}),
		stderr: sandbox.NewCappedBuffer(64 << 10), waitc: make(chan error, 1)}
	if s.cgroups != nil && s.cgroups.Version() == 2 {
		// A v2 command cgroup is joined by moving the whole server into it
		// for the fork; it lives in a leaf of its own otherwise.
		if srv.cg, err = s.cgroups.New(fmt.Sprintf("evalsi-%s-server-%d", s.id, s.seq.Add(1)), sandbox.Limits{}); err != nil {
			return nil, fmt.Errorf("starting the bwrap sandbox: %w", err)
		}
		defer func() {
			if err != nil {
				srv.cg.Remove()
			}
		}()
	}
	// readStatus owns stR: bwrap writes to it until it ends, and would
	// die of SIGPIPE if the host closed it first.
	stR, stW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		stR.Close()
		stW.Close()
		return nil, err
	}
	defer inR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		stR.Close()
		stW.Close()
		inW.Close()
		return nil, err
	}
	defer outW.Close()

	src, err := s.bindSources(proxy)
	if err != nil {
		stR.Close()
		stW.Close()
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting the bwrap sandbox: %w", err)
	}
	// Once bwrap has set the sandbox up, whose mount namespace holds
	// copies of the views, they can go; removing them earlier would
	// unmount them there too.
	released := false
	defer func() {
		if !released {
			src.release()
		}
	}()
	cmd := exec.Command(s.bwrap, s.serverArgs(src)...)
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{stW} // fd 3
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, srv.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	start := cmd.Start
	if s.inNS {
		start = func() error { return s.ns.idmap.Start(cmd, s.helper) }
	}
	if err := start(); err != nil {
		stR.Close()
		stW.Close()
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting bwrap: %w", err)
	}
	stW.Close()
	srv.cmd, srv.w = cmd, inW
	go func() { srv.waitc <- cmd.Wait() }()
	childc := make(chan int, 1)
	go readStatus(stR, childc)
	go srv.read(outR)
	released = true
	go func() {
		select {
		case <-srv.ready:
		case <-srv.dead:
		}
		src.release()
	}()
	fail := func(err error) (*execServer, error) {
		srv.kill()
		return nil, err
	}
	select {
	case pid, ok := <-childc:
		if !ok {
			<-srv.dead
			return fail(fmt.Errorf("starting the bwrap sandbox: %w", srv.deadErr))
		}
		srv.pid = pid
		if srv.cg != nil {
			// Before any command is forked (none is before a request).
			for _, f := range srv.cg.ProcsFiles() {
				if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
					return fail(fmt.Errorf("starting the bwrap sandbox: joining cgroup: %w", err))
				}
			}
		}
		return srv, nil
	case <-srv.dead:
		return fail(fmt.Errorf("starting the bwrap sandbox: %w", srv.deadErr))
	case <-ctx.Done():
		return fail(fmt.Errorf("starting the bwrap sandbox: %w", ctx.Err()))
	}
}

// command is the argv and environment the server runs for a request:
// through the init helper, which sets rlimits the server cannot hold and
// execs the command. Those are the address space (the server, a Go
// runtime, cannot run under it) and, when RLIMIT_NPROC caps processes, the
// command's own lower one: it counts the server's threads with the
// command's processes, so the server keeps serverPidsMargin threads a
// fork bomb cannot take (a Go runtime that cannot start a thread dies).
// A service's leader is always started through it, to become a child
// subreaper (helpers.go).
func (s *Sandbox) command(argv, env []string, service bool) ([]string, []string) {
	var pre []string
	if service {
		pre = append(pre, "--subreaper")
	}
	for _, rl := range s.rlimits.Outer {
		if rl.Name == "as" {
			pre = append(pre, "--rlimit", rl.String())
		}
	}
	if s.nproc {
		pre = append(pre, "--rlimit", limits.Rlimit{Name: "nproc", Value: s.rlimits.NProc}.String())
	}
	if len(pre) == 0 {
		return argv, env
	}
	argv = append(append(append([]string{sandboxHelper}, pre...), "--"), argv...)
	return argv, append(env, reexec.Env+"="+helperInit)
}

// read demultiplexes the server's frames until its stdout closes.
func (srv *execServer) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var kind byte
		var id uint32
		var p []byte
		if kind, id, p, err = execproto.ReadFrame(br); err != nil {
			break
		}
		if kind == execproto.FrameReady {
			select {
			case <-srv.ready:
			default:
				close(srv.ready)
			}
			continue
		}
		srv.mu.Lock()
		c := srv.calls[id]
		srv.mu.Unlock()
		if c == nil {
			continue
		}
		switch {
		case c.service != nil && (kind == execproto.FrameStdout || kind == execproto.FrameStderr):
			c.service.Write(p)
			continue
		}
		switch kind {
		// Never blocks on the hook (the stream delivers from a goroutine
		// of its own), so one slow consumer stalls no other call.
		case execproto.FrameStdout:
			if c.out != nil {
				c.out.Stdout().Write(p)
			}
		case execproto.FrameStderr:
			if c.out != nil {
				c.out.Stderr().Write(p)
			}
		case execproto.FrameJoin:
			var m execproto.JoinMsg
			if m.Unmarshal(p) == nil {
				c.join <- m.Tid
			}
		case execproto.FrameStarted:
			close(c.started)
		case execproto.FrameExit:
			var m execproto.ExitMsg
			if err := m.Unmarshal(p); err != nil {
				m.Setup = "the exec server sent a malformed exit status"
			}
			c.exit <- m
		case execproto.FrameDone:
			var m execproto.DoneMsg
			m.Unmarshal(p)
			c.done <- m
		case execproto.FrameFileResult:
			var m execproto.FileResult
			if err := m.Unmarshal(p); err != nil {
				m.Err = "the exec server sent a malformed file result"
			}
			c.file <- m
		}
	}
	werr := <-srv.waitc
	why := strings.TrimSpace(string(srv.stderr.Bytes()))
	if why == "" {
		why = fmt.Sprintf("bwrap ended (%v)", werr)
	}
	srv.deadErr = fmt.Errorf("the sandbox's exec server ended: %s", why)
	close(srv.dead)
}

func (srv *execServer) send(kind byte, id uint32, payload []byte) error {
	srv.wmu.Lock()
	defer srv.wmu.Unlock()
	if err := execproto.WriteFrame(srv.w, kind, id, payload); err != nil {
		select {
		case <-srv.dead:
			return srv.deadErr
		case <-time.After(time.Second):
		}
		return fmt.Errorf("talking to the sandbox's exec server: %w", err)
	}
	return nil
}

// start sends a command to the server; its output goes to out, which the
// caller stops before its Exec returns.
func (srv *execServer) start(m execproto.ExecMsg, out *sandbox.OutputStream) (*call, error) {
	c := &call{out: out,
		join: make(chan int, 1), started: make(chan struct{}), exit: make(chan execproto.ExitMsg, 1), done: make(chan execproto.DoneMsg, 1)}
	return c, srv.call(c, execproto.FrameExec, m.Marshal())
}

// startService sends a service to the server; its output goes to state.
func (srv *execServer) startService(m execproto.ExecMsg, state *sandbox.ServiceState) (*call, error) {
	c := &call{service: state, join: make(chan int, 1), started: make(chan struct{}), exit: make(chan execproto.ExitMsg, 1), done: make(chan execproto.DoneMsg, 1)}
	return c, srv.call(c, execproto.FrameExec, m.Marshal())
}

// startFile sends a file operation to the server; its answer arrives on
// the call's file channel.
func (srv *execServer) startFile(m execproto.FileMsg) (*call, error) {
	c := &call{file: make(chan execproto.FileResult, 1)}
	return c, srv.call(c, execproto.FrameFile, m.Marshal())
}

// call registers c under a new id and sends its request.
func (srv *execServer) call(c *call, kind byte, payload []byte) error {
	srv.mu.Lock()
	srv.next++
	c.id = srv.next
	srv.calls[c.id] = c
	srv.mu.Unlock()
	if err := srv.send(kind, c.id, payload); err != nil {
		srv.forget(c)
		return err
	}
	return nil
}

func (srv *execServer) forget(c *call) {
	srv.mu.Lock()
	delete(srv.calls, c.id)
	srv.mu.Unlock()
}

// kill ends the server and everything in the sandbox (PID 1 dies with
// bwrap, --die-with-parent) and waits for bwrap.
func (srv *execServer) kill() {
	if srv.cmd.Process != nil {
		syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGKILL)
	}
	srv.w.Close()
	<-srv.dead
	srv.mu.Lock()
	slot := srv.armed
	srv.armed = nil
	srv.mu.Unlock()
	if slot != nil {
		slot.cg.Remove()
	}
	if srv.cg != nil {
		srv.cg.Kill()
		srv.cg.Remove()
	}
}

// server returns the running exec server for the current network policy,
// starting it (again) when there is none, it died, or SetPolicy widened the
// network to the proxy since it started. The caller releases it.
func (s *Sandbox) server(ctx context.Context) (*execServer, error) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	proxy := ""
	if s.currentPolicy().Network != sandbox.NetworkDeny {
		s.mu.Lock()
		proxy = s.proxy
		s.mu.Unlock()
	}
	if srv := s.srv; srv != nil {
		select {
		case <-srv.dead:
			s.retire(srv)
		default:
			if srv.proxy == proxy {
				srv.mu.Lock()
				srv.active++
				srv.mu.Unlock()
				return srv, nil
			}
			s.retire(srv)
		}
	}
	srv, err := s.startServer(ctx, proxy)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	srv.active = 1
	s.armNext(srv)
	return srv, nil
}

// armSlot is a forking thread of the server (call id) that the host has
// moved into cg, the cgroup of the command that will fork from it.
type armSlot struct {
	id uint32
	cg *limits.Cgroup
}

// takeArmed returns the armed slot and readies the next one, or nil when
// none is ready (the command then joins its cgroup on its own path).
func (s *Sandbox) takeArmed(srv *execServer) *armSlot {
	srv.mu.Lock()
	slot := srv.armed
	srv.armed = nil
	srv.mu.Unlock()
	s.armNext(srv)
	return slot
}

// armNext readies, in the background, the forking thread of the next
// command: its cgroup made and the thread moved in (cgroup v1, where the
// host moves a single thread). Making the cgroup and the Join/Go round
// trip are then off that command's path. Under v2 the whole server moves
// for each fork instead (joinCgroup), which cannot be done ahead.
func (s *Sandbox) armNext(srv *execServer) {
	if s.cgroups == nil || s.cgroups.Version() != 1 {
		return
	}
	srv.mu.Lock()
	if srv.arming || srv.armed != nil || srv.retired {
		srv.mu.Unlock()
		return
	}
	srv.arming = true
	srv.mu.Unlock()
	s.removing.Add(1)
	go func() {
		defer s.removing.Done()
		slot, err := s.arm(srv)
		srv.mu.Lock()
		srv.arming = false
		dead := false
		select {
		case <-srv.dead:
			dead = true
		default:
		}
		if err == nil && !dead && !srv.retired {
			srv.armed, slot = slot, nil
		}
		srv.mu.Unlock()
		if slot != nil {
			// The server ended meanwhile: its thread is gone with it.
			srv.send(execproto.FrameKill, slot.id, nil)
			slot.cg.Remove()
		}
	}()
}

// arm makes the next command's cgroup, has the server ready a forking
// thread (FrameArm) and moves that thread into the cgroup.
func (s *Sandbox) arm(srv *execServer) (*armSlot, error) {
	cg, err := s.cgroups.New(fmt.Sprintf("evalsi-%s-%d", s.id, s.seq.Add(1)), s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	c := &call{join: make(chan int, 1)}
	if err := srv.call(c, execproto.FrameArm, nil); err != nil {
		cg.Remove()
		return nil, err
	}
	defer srv.forget(c)
	select {
	case tid := <-c.join:
		if _, err := s.joinCgroup(srv, cg, tid); err != nil {
			srv.send(execproto.FrameKill, c.id, nil)
			cg.Remove()
			return nil, err
		}
		if err := srv.send(execproto.FrameGo, c.id, nil); err != nil {
			cg.Remove()
			return nil, err
		}
		return &armSlot{id: c.id, cg: cg}, nil
	case <-srv.dead:
		cg.Remove()
		return nil, srv.deadErr
	}
}

// retire detaches srv from the sandbox; it is killed once its last
// command ends. Called with srvMu held.
func (s *Sandbox) retire(srv *execServer) {
	s.srv = nil
	srv.mu.Lock()
	srv.retired = true
	idle := srv.active == 0
	srv.mu.Unlock()
	if idle {
		srv.kill()
	}
}

func (s *Sandbox) release(srv *execServer) {
	srv.mu.Lock()
	srv.active--
	last := srv.active == 0 && srv.retired
	srv.mu.Unlock()
	if last {
		srv.kill()
	}
}

// stopServer kills the sandbox's server (Close).
func (s *Sandbox) stopServer() {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.srv != nil {
		srv := s.srv
		s.srv = nil
		srv.kill()
	}
}

// joinCgroup moves the server's forking thread (cgroup v1: per-thread
// tasks files; the thread ends right after the fork) or the whole server
// (v2) into the command's cgroup. For v2 the returned function moves it
// back once the command has started, and pids.max is raised by the
// server's own threads until then, since they count in it.
func (s *Sandbox) joinCgroup(srv *execServer, cg *limits.Cgroup, nsTid int) (func(), error) {
	if s.cgroups.Version() == 1 {
		tid, err := hostTid(srv.pid, nsTid)
		if err != nil {
			return nil, err
		}
		for _, f := range cg.ProcsFiles() {
			if err := os.WriteFile(filepath.Join(filepath.Dir(f), "tasks"), []byte(strconv.Itoa(tid)), 0); err != nil {
				return nil, fmt.Errorf("joining cgroup: %w", err)
			}
		}
		return nil, nil
	}
	s.v2mu.Lock()
	dir := filepath.Dir(cg.ProcsFiles()[0])
	pidsMax := filepath.Join(dir, "pids.max")
	limit, err := os.ReadFile(pidsMax)
	if err != nil {
		s.v2mu.Unlock()
		return nil, fmt.Errorf("joining cgroup: %w", err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(limit)))
	threads, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", srv.pid))
	back := func() {
		for _, f := range srv.cg.ProcsFiles() {
			os.WriteFile(f, []byte(strconv.Itoa(srv.pid)), 0)
		}
		os.WriteFile(pidsMax, limit, 0)
		s.v2mu.Unlock()
	}
	if err := os.WriteFile(pidsMax, []byte(strconv.Itoa(n+len(threads)+serverPidsMargin)), 0); err != nil {
		back()
		return nil, fmt.Errorf("joining cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(srv.pid)), 0); err != nil {
		back()
		return nil, fmt.Errorf("joining cgroup: %w", err)
	}
	return back, nil
}

// hostTid maps a thread id inside the server's PID namespace to the host's.
func hostTid(pid, nsTid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("finding the exec server's thread: %w", err)
	}
	want := strconv.Itoa(nsTid)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) >= 2 && f[len(f)-1] == want {
					return strconv.Atoi(f[0])
				}
				break
			}
		}
	}
	return 0, errors.New("finding the exec server's thread: no thread " + want + " in its PID namespace")
}

// killCommands kills what runs in a command's cgroup. Under cgroup v1 the
// server's forking thread may not have ended yet, and cgroup.procs then
// lists the server, which is spared; under v2 the server is never in it
// once moved back (callers check).
func (s *Sandbox) killCommands(srv *execServer, cg *limits.Cgroup) {
	if s.cgroups.Version() != 1 {
		cg.Kill()
		return
	}
	self := strconv.Itoa(srv.pid)
	for range 50 {
		n := 0
		for _, f := range cg.ProcsFiles() {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil && p != self && pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Package execproto is the exec protocol every sandbox with a server inside
// speaks, and that server: in a bwrap sandbox, the engine binary
// re-executed as PID 1 of the sandbox's namespaces (bwrap --as-pid-1),
// started once per sandbox; in a microVM, evalsi-guest, the guest's init,
// over its control port (guest.go, client.go). The host sends it commands over
// its stdin and reads their output and exit statuses from its stdout, as
// frames: kind (1 byte), call id (4), payload length (4), payload. Each
// command is forked inside the existing namespaces instead of building new
// ones, which is most of what a bwrap invocation costs.
//
// Why a command stays as contained as under its own bwrap invocation:
//   - it is forked under the sandbox's seccomp filter, which the server
//     installs on the forking thread alone, with a listener it supervises
//     (notify.go); it inherits the capabilities bwrap gave the server (a
//     container's set, inside the sandbox's user namespace, or none) but
//     CAP_SYS_PTRACE, which the server keeps to itself, and the rlimits
//     the server sets on itself before serving;
//   - it gets its own session and (with cgroups) its own cgroup, which its
//     first process is in from the start: the server forks it from a thread
//     the host has moved into that cgroup (cgroup v1; that thread ends right
//     after), or with the whole server moved in for the fork (v2);
//   - whatever it leaves running is killed when it ends (its cgroup, its
//     session, and, when no other command runs, every process but PID 1
//     and the running services' leaders and their descendants, sweep.go);
//   - it runs in a Landlock domain of its own (domain.go), so it cannot
//     reach into the memory or descriptors of any process outside it, a
//     service's above all;
//   - the server is PID 1, so commands cannot SIGKILL or SIGSTOP it and every
//     other signal lands in its handler; it is not dumpable, so commands
//     (same uid, but without CAP_SYS_PTRACE) cannot open its /proc/1/fd
//     pipes to the host or read its memory.
//
// The server registers with reexec.RegisterEarly and imports only packages
// Go initializes first: the engine binary started as the server (once per
// sandbox) runs it before initializing the few hundred packages it does
// not need, tens of milliseconds of CPU. Hence syscall rather than x/sys,
// and a small binary encoding rather than encoding/json.
package execproto

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"evals.si/sandbox/reexec"
)

// Helper is the re-exec helper name of the server.
const Helper = "evalsi-bwrap-serve"

// Frame kinds.
const (
	FrameExec    = 'x' // host → server: ExecMsg
	FrameGo      = 'g' // host → server: the forking thread is in the command's cgroup
	FrameArm     = 'w' // host → server: ready a forking thread ahead (FrameJoin, FrameGo)
	FrameKill    = 'k' // host → server: kill the command and everything it started
	FrameJoin    = 'j' // server → host: JoinMsg, move this thread into the cgroup
	FrameStarted = 's' // server → host: the command's first process exists
	FrameStdout  = 'o'
	FrameStderr  = 'e'
	FrameExit    = 'q' // server → host: ExitMsg
	FrameDone    = 'd' // server → host: DoneMsg; the call is over

	FrameReady      = 'y' // server → host, call 0: the sandbox is set up and serving
	FrameFile       = 'f' // host → server: FileMsg
	FrameFileResult = 'r' // server → host: FileResult; the call is over
)

// maxFrame bounds a payload (a request carries the command's stdin).
const maxFrame = 1 << 30

// ExecMsg is one command, fully resolved by the host.
type ExecMsg struct {
	Argv  []string
	Env   []string
	Dir   string
	Stdin []byte
	// Limit caps stdout and stderr each; the rest is read and dropped.
	Limit int
	// Join: fork from a thread the host first moves into the command's
	// cgroup (FrameJoin, then FrameGo).
	Join bool
	// Armed: fork from the thread readied under this call id (FrameArm),
	// which the host moved into the command's cgroup ahead of the
	// command, so the fork waits for no round trip.
	Armed uint32
	// User: run as UID:GID (inside the sandbox's user namespace) instead
	// of the server's root; the switch drops the capabilities, as
	// docker run --user does.
	User     bool
	UID, GID int
	// Spec, when set, is who the command runs as instead (ExecRequest.User,
	// docker exec -u's forms), resolved here from the sandbox's own
	// /etc/passwd and /etc/group (lookupUser); HOME is passwd's unless Env
	// has one.
	Spec string
	// Service: a long-running process (Sandbox.StartService), spared with
	// its descendants by the sweep after each command (killLeftovers); the
	// host starts it through the init helper's --subreaper. Its stderr
	// goes to its stdout pipe, so its output arrives interleaved as
	// FrameStdout.
	Service bool
}

type JoinMsg struct {
	Tid int
}

type ExitMsg struct {
	Code int
	// Setup is why the command could not be started for the sandbox's
	// reasons (a missing workdir): an error, not a result.
	Setup string
}

type DoneMsg struct {
	TruncatedStdout bool
	TruncatedStderr bool
	// Denials are the attempts the seccomp filter refused (and passed to
	// the server) while the command ran.
	Denials []Denial
}

func WriteFrame(w io.Writer, kind byte, id uint32, payload []byte) error {
	b := make([]byte, 9, 9+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], id)
	binary.BigEndian.PutUint32(b[5:], uint32(len(payload)))
	_, err := w.Write(append(b, payload...))
	return err
}

func ReadFrame(r *bufio.Reader) (kind byte, id uint32, payload []byte, err error) {
	return ReadFrameMax(r, maxFrame)
}

// ReadFrameMax is ReadFrame refusing payloads over max bytes before it
// allocates them.
func ReadFrameMax(r *bufio.Reader, max uint32) (kind byte, id uint32, payload []byte, err error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[5:])
	if n > max {
		return 0, 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, 0, nil, err
	}
	return h[0], binary.BigEndian.Uint32(h[1:]), payload, nil
}

func init() {
	reexec.RegisterEarly(Helper, Main)
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "evalsi %s: %v\n", Helper, err)
	return 125
}

type server struct {
	wmu sync.Mutex
	out io.Writer
	// filter is the seccomp program each command's first process is forked
	// under (notify.go); nil: none (the host passed none).
	filter []byte
	// dropPtrace, when set, keeps CAP_SYS_PTRACE (or, in a guest, every
	// capability but ServeOptions.KeepCaps) from the command about to be
	// forked on the calling thread (ptraceDropper, capDropper).
	dropPtrace func() error
	// domain is the Landlock ruleset each command's forking thread enters
	// (domain.go); -1: the kernel has none.
	domain int
	opts   ServeOptions
	// gone is closed when a write to the host failed (goneErr says how,
	// under wmu): the session is over.
	gone    chan struct{}
	goneErr error
	// wg counts the session's call goroutines (track).
	wg sync.WaitGroup

	mu sync.Mutex
	// ending: the session is over, no call starts any more.
	ending   bool
	calls    map[uint32]*serverCall
	waiters  map[int]chan syscall.WaitStatus
	inflight int
	// services are the pids of the services' leaders (their first
	// processes) not yet reaped, which the sweep after a command spares
	// with their descendants (sweep.go).
	services map[int]bool
}

type serverCall struct {
	goc    chan struct{}
	killc  chan struct{}
	killed bool
	pid    int
	// jobs, for an armed thread's call, takes the fork the thread runs.
	jobs chan func()
}

// Main: [--forward SOCK PORT] [--rlimit RESOURCE=N]... [--seccomp HEX]; PORT
// is on 127.0.0.1, RESOURCE a number (RLIMIT_*), HEX a struct sock_filter
// array that passes what it refuses to the server (SECCOMP_RET_USER_NOTIF).
func Main(args []string) int {
	// bwrap's status and block pipes are inherited without close-on-exec;
	// commands must get only the stdio the server gives them.
	if _, _, e := syscall.RawSyscall(sysCloseRange, 3, ^uintptr(0), closeRangeCloexec); e != 0 {
		return fail(fmt.Errorf("marking inherited descriptors close-on-exec: %w", e))
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return fail(fmt.Errorf("making the server non-dumpable: %w", e))
	}
	// Every signal a command sends PID 1 lands here and is dropped (Serve
	// reaps on SIGCHLD).
	signal.Notify(make(chan os.Signal, 1))
	var o ServeOptions
	for len(args) > 0 {
		switch {
		case args[0] == "--forward" && len(args) >= 3:
			if err := forward(args[1], args[2]); err != nil {
				return fail(err)
			}
			args = args[3:]
		case args[0] == "--seccomp" && len(args) >= 2:
			b, err := hex.DecodeString(args[1])
			if err != nil || len(b) == 0 || len(b)%8 != 0 {
				return fail(fmt.Errorf("bad seccomp program %q", args[1]))
			}
			o.Seccomp = b
			args = args[2:]
		case args[0] == "--rlimit" && len(args) >= 2:
			if err := setRlimit(args[1]); err != nil {
				return fail(fmt.Errorf("rlimit %s: %w", args[1], err))
			}
			args = args[2:]
		default:
			return fail(fmt.Errorf("bad arguments at %q", args[0]))
		}
	}
	// The host going away ends everything (PID 1 exiting does); a request
	// the server cannot read is a fault of the host's.
	if err := Serve(context.Background(), os.Stdin, os.Stdout, o); errors.Is(err, errBadRequest) {
		return fail(err)
	}
	return 0
}

// forward listens on 127.0.0.1:port inside the sandbox's network
// namespace and relays each connection to the egress proxy's socket bound
// at sock.
func forward(sock, port string) error {
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("proxy forwarder port %q: %w", port, err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("proxy forwarder: %w", err)
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("proxy forwarder: listening on 127.0.0.1:%d: %w", p, err)
	}
	if err := syscall.Listen(fd, 128); err != nil {
		return fmt.Errorf("proxy forwarder: %w", err)
	}
	go func() {
		for {
			c, _, err := syscall.Accept4(fd, syscall.SOCK_CLOEXEC)
			if err == syscall.EINTR || err == syscall.ECONNABORTED {
				continue
			}
			if err != nil {
				return
			}
			go relay(c, sock)
		}
	}()
	return nil
}

// relay copies between a client connection and the proxy's socket, both
// ways, until both directions end.
func relay(c int, sock string) {
	u, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err == nil {
		if err = syscall.Connect(u, &syscall.SockaddrUnix{Name: sock}); err != nil {
			syscall.Close(u)
		}
	}
	if err != nil {
		syscall.Close(c)
		return
	}
	var wg sync.WaitGroup
	half := func(dst, src int) {
		defer wg.Done()
		io.Copy(fdWriter(dst), fdReader(src))
		syscall.Shutdown(dst, syscall.SHUT_WR)
	}
	wg.Add(2)
	go half(u, c)
	go half(c, u)
	wg.Wait()
	syscall.Close(c)
	syscall.Close(u)
}

type fdReader int

func (f fdReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

type fdWriter int

func (f fdWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := syscall.Write(int(f), p[done:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// setRlimit sets "RESOURCE=N" on the server, which its commands inherit.
func setRlimit(spec string) error {
	r, v, ok := strings.Cut(spec, "=")
	res, err1 := strconv.Atoi(r)
	val, err2 := strconv.ParseUint(v, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return errors.New("want RESOURCE=N")
	}
	return syscall.Setrlimit(res, &syscall.Rlimit{Cur: val, Max: val})
}

// Linux constants syscall lacks (the same on every architecture).
const (
	sysCloseRange     = 436
	closeRangeCloexec = 1 << 2
	prSetDumpable     = 4
	prCapbsetDrop     = 24
	prCapAmbient      = 47
	prCapAmbientLower = 3
	capSysPtrace      = 19
	capVersion3       = 0x20080522
)

// ptraceDropper: bwrap gives the server CAP_SYS_PTRACE (inside the
// sandbox's user namespace) so that it can read the memory of any command
// whose call its seccomp filter passes up, whatever its uid or dumpability;
// commands must not get it. Each command is forked from a thread of its own
// that ends right after the fork, so the returned func drops the capability
// from that thread's bounding, inheritable and ambient sets (which the
// command's capabilities after exec are computed from) and every other
// thread keeps it. Per thread, not AllThreadsSyscall, which a cgo build
// refuses. nil: the server has no CAP_SYS_PTRACE to keep to itself.
func ptraceDropper() (func() error, error) {
	hdr := struct {
		version uint32
		pid     int32
	}{version: capVersion3}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return nil, fmt.Errorf("reading the server's capabilities: %w", e)
	}
	if data[0].permitted&(1<<capSysPtrace) == 0 {
		return nil, nil // bwrap gave none (no capabilities at all, or not asked)
	}
	data[0].inheritable &^= 1 << capSysPtrace
	return func() error {
		for _, c := range []struct {
			what       string
			trap       uintptr
			a1, a2, a3 uintptr
		}{
			{"lowering the ambient CAP_SYS_PTRACE", syscall.SYS_PRCTL, prCapAmbient, prCapAmbientLower, capSysPtrace},
			{"dropping CAP_SYS_PTRACE from the bounding set", syscall.SYS_PRCTL, prCapbsetDrop, capSysPtrace, 0},
			{"dropping the inheritable CAP_SYS_PTRACE", syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0},
		} {
			if _, _, e := syscall.RawSyscall(c.trap, c.a1, c.a2, c.a3); e != 0 {
				return fmt.Errorf("%s: %w", c.what, e)
			}
		}
		return nil
	}, nil
}

func (sv *server) send(kind byte, id uint32, payload []byte) {
	// An error ends the session (Serve): nothing more reaches the host.
	sv.sendErr(kind, id, payload)
}

func (sv *server) sendMsg(kind byte, id uint32, m interface{ Marshal() []byte }) {
	sv.send(kind, id, m.Marshal())
}

// reap collects every exited child (commands, and the orphans PID 1
// inherits) and hands a command's status to its waiter. It holds mu, under
// which commands are started and registered, so a status is never
// collected before its waiter exists.
func (sv *server) reap() {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		if w, ok := sv.waiters[pid]; ok {
			delete(sv.waiters, pid)
			w <- ws
		}
		// Reaped, its pid is free for another process: no longer a
		// leader to spare.
		delete(sv.services, pid)
	}
}

var errKilledBeforeStart = errors.New("killed before it started")

type started struct {
	p     *os.Process
	waitc chan syscall.WaitStatus
	sup   *supervisor
	err   error
	// confined is the command's Confinement (ServeOptions.Confine), its
	// Finish not yet called.
	confined *Confinement
}

// finishConfinement ends st's confinement and says what it refused.
func (st *started) finishConfinement() []Denial {
	if st.confined == nil || st.confined.Finish == nil {
		return nil
	}
	f := st.confined.Finish
	st.confined = nil
	return f()
}

// errSetup is a failure of the sandbox, not of the command.
type errSetup struct{ error }

// start starts a command and registers it for reaping, under mu so that
// reap cannot collect it first, kill sees its pid and a sweep never sees a
// service that is not registered yet.
func (sv *server) start(c *serverCall, bin string, argv []string, attr *os.ProcAttr, service bool, cf *Confinement) started {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if c.killed {
		return started{err: errKilledBeforeStart}
	}
	var leave func()
	if cf != nil && cf.Join != nil {
		var err error
		if leave, err = cf.Join(); err != nil {
			return started{err: errSetup{fmt.Errorf("joining the command's cgroup: %w", err)}}
		}
	}
	p, err := os.StartProcess(bin, argv, attr)
	if leave != nil {
		leave()
	}
	if err != nil {
		return started{err: err}
	}
	w := make(chan syscall.WaitStatus, 1)
	sv.waiters[p.Pid] = w
	if service {
		sv.services[p.Pid] = true
	} else {
		sv.inflight++
	}
	c.pid = p.Pid
	return started{p: p, waitc: w}
}

func (sv *server) exec(id uint32, c *serverCall, m ExecMsg) {
	defer func() {
		sv.mu.Lock()
		delete(sv.calls, id)
		sv.mu.Unlock()
	}()
	finish := func(code int, setup string, stderr string) {
		if stderr != "" {
			sv.send(FrameStderr, id, []byte(stderr))
		}
		sv.sendMsg(FrameExit, id, ExitMsg{Code: code, Setup: setup})
		sv.sendMsg(FrameDone, id, DoneMsg{})
	}
	if len(m.Argv) == 0 {
		finish(0, "empty argv", "")
		return
	}
	if st, err := os.Stat(m.Dir); err != nil || !st.IsDir() {
		finish(0, fmt.Sprintf("workdir %s: not a directory in the sandbox (%v)", m.Dir, err), "")
		return
	}
	argv, env := m.Argv, m.Env
	var cred *syscall.Credential
	if m.Spec != "" {
		u, err := lookupUser(m.Spec, "/etc")
		if err == nil {
			cred, err = u.credential(m.Spec)
		}
		if err != nil {
			finish(0, err.Error(), "")
			return
		}
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
			env = append(env, "HOME="+u.home)
		}
	}
	bin, err := lookPath(m.Argv[0], m.Dir, env)
	if err != nil {
		finish(127, "", fmt.Sprintf("evalsi: execvp %s: %v\n", m.Argv[0], err))
		return
	}
	if m.Service && sv.opts.Service != nil {
		bin, argv = sv.opts.Service(bin, argv)
	}

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		finish(0, "opening /dev/null: "+err.Error(), "")
		return
	}
	stdin := devnull
	var stdinW *os.File
	if len(m.Stdin) > 0 {
		if stdin, stdinW, err = os.Pipe(); err != nil {
			devnull.Close()
			finish(0, "stdin pipe: "+err.Error(), "")
			return
		}
		defer devnull.Close()
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		finish(0, "stdout pipe: "+err.Error(), "")
		return
	}
	// A service's stdout and stderr are one pipe, so its output keeps
	// its order.
	errR, errW := outR, outW
	if !m.Service {
		if errR, errW, err = os.Pipe(); err != nil {
			finish(0, "stderr pipe: "+err.Error(), "")
			return
		}
	}
	attr := &os.ProcAttr{Dir: m.Dir, Env: env, Files: []*os.File{stdin, outW, errW}, Sys: &syscall.SysProcAttr{Setsid: true}}
	switch {
	case m.Spec != "":
		attr.Sys.Credential = cred
	case m.User:
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(m.UID), Gid: uint32(m.GID)}
	}

	var confined *Confinement
	if sv.opts.Confine != nil {
		cf, err := sv.opts.Confine(m.Service)
		if err != nil {
			stdin.Close()
			outW.Close()
			errW.Close()
			outR.Close()
			errR.Close()
			if stdinW != nil {
				stdinW.Close()
			}
			finish(0, "confining the command: "+err.Error(), "")
			return
		}
		confined = &cf
	}

	res := make(chan started, 1)
	// fork runs on a thread of its own, locked and never unlocked: the
	// thread ends with its goroutine, right after the fork, so nothing
	// else ever runs on it while it is in the command's cgroup or under
	// its seccomp filter.
	fork := func() {
		if sv.dropPtrace != nil {
			if err := sv.dropPtrace(); err != nil {
				res <- started{err: errSetup{err}}
				return
			}
		}
		if sv.domain >= 0 && !m.Service {
			if err := enterDomain(sv.domain); err != nil {
				res <- started{err: errSetup{err}}
				return
			}
		}
		var sup *supervisor
		if sv.filter != nil {
			fd, err := installFilter(sv.filter)
			if err == nil {
				sup, err = supervise(fd)
			}
			if err != nil {
				res <- started{err: errSetup{err}}
				return
			}
		}
		st := sv.start(c, bin, argv, attr, m.Service, confined)
		st.sup = sup
		res <- st
	}
	switch {
	case m.Armed != 0:
		th := sv.takeArmed(m.Armed)
		if th == nil {
			res <- started{err: errSetup{fmt.Errorf("no forking thread armed as %d", m.Armed)}}
			break
		}
		select {
		case th.jobs <- fork:
		case <-th.killc:
			res <- started{err: errKilledBeforeStart}
		case <-c.killc:
			close(th.jobs) // the armed thread ends unused
			res <- started{err: errKilledBeforeStart}
		}
	default:
		go func() {
			runtime.LockOSThread()
			if m.Join {
				sv.sendMsg(FrameJoin, id, JoinMsg{Tid: syscall.Gettid()})
				select {
				case <-c.goc:
				case <-c.killc:
					res <- started{err: errKilledBeforeStart}
					return
				}
			}
			fork()
		}()
	}
	st := <-res
	st.confined = confined
	stdin.Close()
	outW.Close()
	errW.Close()
	if st.err != nil {
		outR.Close()
		errR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		if st.sup != nil {
			st.sup.stop()
		}
		st.finishConfinement()
		if errors.Is(st.err, errKilledBeforeStart) {
			finish(128+int(syscall.SIGKILL), "", "")
			return
		}
		if se, ok := st.err.(errSetup); ok {
			finish(0, se.Error(), "")
			return
		}
		finish(127, "", fmt.Sprintf("evalsi: execvp %s: %v\n", m.Argv[0], st.err))
		return
	}
	sv.send(FrameStarted, id, nil)
	st.p.Release()
	if stdinW != nil {
		go func() {
			stdinW.Write(m.Stdin)
			stdinW.Close()
		}()
	}
	if m.Service {
		sv.serve(id, st, outR)
		return
	}
	var wg sync.WaitGroup
	var done DoneMsg
	stream := func(r *os.File, kind byte, truncated *bool) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		sent := 0
		for {
			n, err := r.Read(buf)
			if n > 0 {
				k := min(n, m.Limit-sent)
				if k > 0 {
					sv.send(kind, id, buf[:k])
					sent += k
				}
				if k < n {
					*truncated = true
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go stream(outR, FrameStdout, &done.TruncatedStdout)
	go stream(errR, FrameStderr, &done.TruncatedStderr)

	ws := <-st.waitc
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	sv.sendMsg(FrameExit, id, ExitMsg{Code: code})
	sv.killLeftovers(st.p.Pid, true)

	// Output ends when the last holder of the pipes is gone; something
	// that escaped the kill (left while another command runs, or a pipe
	// passed to a service) must not hold the call open.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	if st.sup != nil {
		done.Denials = st.sup.stop()
	}
	done.Denials = append(done.Denials, st.finishConfinement()...)
	sv.sendMsg(FrameDone, id, done)
}

// serve relays a service's output until its leader exits, then ends what
// it left, as a container's processes end with its main process: its
// session at once, and the rest (its detached daemons, reparented to the
// server when the leader died) with the sweep, at once when no command
// runs, else when the last running command ends.
func (sv *server) serve(id uint32, st started, out *os.File) {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 32<<10)
		for {
			n, err := out.Read(buf)
			if n > 0 {
				sv.send(FrameStdout, id, buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	ws := <-st.waitc
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	// reap has dropped it from the services.
	sid := st.p.Pid
	for range 50 {
		if killSession(sid) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	sv.sweep()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// Something outside its session holds the pipe (a descriptor
		// passed on): the service is over all the same.
	}
	out.Close()
	<-drained
	var done DoneMsg
	if st.sup != nil {
		done.Denials = st.sup.stop()
	}
	done.Denials = append(done.Denials, st.finishConfinement()...)
	sv.sendMsg(FrameExit, id, ExitMsg{Code: code})
	sv.sendMsg(FrameDone, id, done)
}

// kill stops call id: its first process and its session, or, before it
// started, its start.
func (sv *server) kill(id uint32) {
	sv.mu.Lock()
	c := sv.calls[id]
	if c == nil {
		sv.mu.Unlock()
		return
	}
	pid := c.pid
	if !c.killed {
		c.killed = true
		close(c.killc)
	}
	sv.mu.Unlock()
	if pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		sv.killLeftovers(pid, false)
	}
}

// killLeftovers kills the processes of the session sid (a command's);
// ended says the command's first process has exited, and then, once no
// other command runs, the sweep kills the rest of what it left.
func (sv *server) killLeftovers(sid int, ended bool) {
	for range 50 {
		if killSession(sid) == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !ended {
		return
	}
	sv.mu.Lock()
	sv.inflight--
	sv.mu.Unlock()
	sv.sweep()
}

// sweep kills, unless a command runs, every process but PID 1 and the
// running services' leaders and their descendants (sweep.go), which
// catches what left a command's session (setsid, a double fork) and what
// an ended service left.
func (sv *server) sweep() {
	if os.Getpid() != 1 {
		// From anywhere else, far more than the sandbox's processes.
		return
	}
	for range 50 {
		// Under mu, so no command or service starts mid-scan, none that
		// started since is swept (inflight says) and no leader is reaped
		// meanwhile; repeated for what forked between reading a process
		// and killing it.
		sv.mu.Lock()
		n := 0
		switch {
		case sv.inflight > 0:
		case len(sv.services) == 0:
			// From PID 1, kill(-1) reaches every process of the
			// namespace but itself.
			syscall.Kill(-1, syscall.SIGKILL)
		default:
			n = killOutside(sv.services)
		}
		sv.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killSession SIGKILLs every process whose session is sid and returns how
// many it found.
func killSession(sid int) int { return killSessions(func(s int) bool { return s == sid }) }

// lookPath finds name as execvp would in dir with env's PATH (glibc's
// default when PATH is unset).
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := "/bin:/usr/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, d := range strings.Split(pathEnv, ":") {
		if d == "" {
			d = "."
		}
		p := d + "/" + name
		if !strings.HasPrefix(p, "/") {
			p = dir + "/" + p
		}
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if syscall.Access(p, 1 /* X_OK */) != nil {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", os.ErrPermission
	}
	return "", errors.New("No such file or directory")
}

// arm readies a forking thread under call id: locked to its goroutine, it
// tells the host its id (FrameJoin), waits until the host has moved it
// into the next command's cgroup (FrameGo), then runs the one fork an
// ExecMsg with Armed = id gives it and ends with it. The call stays in
// calls until an exec takes it, so a kill or the session's end stops it.
func (sv *server) arm(id uint32, c *serverCall) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	sv.sendMsg(FrameJoin, id, JoinMsg{Tid: syscall.Gettid()})
	select {
	case <-c.goc:
	case <-c.killc:
		sv.takeArmed(id)
		return
	}
	select {
	case fork, ok := <-c.jobs:
		if ok {
			fork()
		}
	case <-c.killc:
		sv.takeArmed(id)
	}
}

// takeArmed removes the armed thread id from the calls and returns it (nil
// when there is none).
func (sv *server) takeArmed(id uint32) *serverCall {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	c := sv.calls[id]
	if c == nil || c.jobs == nil {
		return nil
	}
	delete(sv.calls, id)
	return c
}

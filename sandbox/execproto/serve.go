package execproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Serve is the serving loop of one host session: bwrap's server runs one
// (Main) over its stdin and stdout for the sandbox's life; a microVM guest
// runs one per connection of the host to its control port, for as long as
// the guest lives (a restored snapshot gets a new connection).

// ServeOptions are what a guest's server has that bwrap's has not.
type ServeOptions struct {
	// Setup and Restore handle FrameSetup and FrameRestore; each is
	// answered with a FileResult, with Err set from the error. Nil: the
	// request is refused (bwrap has nothing to set up this way). They run
	// outside the stream's reader, one request at a time.
	Setup   func(ctx context.Context, m SetupMsg) error
	Restore func(ctx context.Context, m RestoreMsg) error
	// Confine, when set, gives each command (and service) a containment
	// of its own before its first process is forked (a guest's cgroup).
	Confine func(service bool) (Confinement, error)
	// KeepCaps, when non-nil, are the only capabilities (Linux numbers)
	// commands may hold: every other is dropped from the forking thread's
	// bounding and inheritable sets (ambient cleared), so a command that
	// runs as root gets only these, while the server keeps all of its
	// own. Nil: bwrap's rule, every capability but CAP_SYS_PTRACE.
	KeepCaps []int
	// Service, when set, rewrites a service's resolved program and argv
	// (a wrapper that makes the leader a child subreaper, sweep.go); bwrap's
	// host does that itself, with the init helper's --subreaper.
	Service func(bin string, argv []string) (string, []string)
	// Tunnel, when set, is called once per session with the function that
	// writes the session's frames, and returns what the tunnel frames
	// from the host go to (a *Tunnel); it is closed when the session ends.
	Tunnel func(send TunnelSend) FrameHandler
	// Seccomp, when set, is the seccomp program every command and service
	// is forked under, a struct sock_filter array whose refusals go to the
	// server (limits.SeccompNotifyFilter; Main's --seccomp): it is
	// installed on the forking thread alone, with a listener the server
	// supervises (notify.go), so what it refuses comes back in DoneMsg as
	// denials. Installing it takes no_new_privs or, as in a guest,
	// CAP_SYS_ADMIN on the forking thread. It answers clone3 ENOSYS, so
	// with it a Confinement's cgroup is entered by Join, not by the fork.
	Seccomp []byte
}

// FrameHandler takes the tunnel frames of a session (Tunnel is one).
type FrameHandler interface {
	// Frame is called from the stream's reader and must not block.
	Frame(kind byte, id uint32, payload []byte)
	Close()
}

// Confinement is one command's containment from ServeOptions.Confine.
type Confinement struct {
	// Join, when set, puts the command's first process in its cgroup
	// from the start: it is called on the forking thread, under the
	// server's lock (no other command or service is forked meanwhile),
	// just before the fork, and moves the server itself into the cgroup
	// (cgroup v2 moves whole processes, not threads); the leave it
	// returns, called right after the fork, moves the server back. The
	// fork cannot do it itself (clone3 CLONE_INTO_CGROUP): under the
	// seccomp filter, which is on the forking thread by then, clone3 is
	// ENOSYS, and Go's fork does not fall back to clone for it.
	Join func() (leave func(), err error)
	// Finish is called once, when the command is over and what it left
	// has been killed (or when it could not start): it ends what is still
	// in the cgroup, releases it, and says what its limits refused.
	Finish func() []Denial
}

// errBadRequest is a request the server cannot decode: the host and the
// server disagree about the protocol.
var errBadRequest = errors.New("bad request")

// Serve serves one session: it sends FrameReady, then answers the
// requests it reads from in on out, until in ends or fails, out fails, or
// ctx is cancelled (then the caller closes the stream, which ends the
// reader). Before it returns, every call of the session is killed (its
// services too) and has ended. It returns nil when the host closed the
// stream, else why the session ended.
func Serve(ctx context.Context, in io.Reader, out io.Writer, o ServeOptions) (err error) {
	dropCaps, err := ptraceDropper()
	if o.KeepCaps != nil {
		dropCaps, err = capDropper(o.KeepCaps)
	}
	if err != nil {
		return err
	}
	domain, err := commandDomain()
	if err != nil {
		return err
	}
	if domain >= 0 {
		defer syscall.Close(domain)
	}
	sv := &server{out: out, filter: o.Seccomp, dropPtrace: dropCaps, domain: domain, opts: o, gone: make(chan struct{}),
		calls: map[uint32]*serverCall{}, waiters: map[int]chan syscall.WaitStatus{}, services: map[int]bool{}}

	// SIGCHLD means children to reap (commands, and the orphans PID 1
	// inherits). The reaper runs until every call has ended.
	sigc := make(chan os.Signal, 64)
	signal.Notify(sigc, syscall.SIGCHLD)
	reaped := make(chan struct{})
	stopReap := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			select {
			case <-sigc:
				sv.reap()
			case <-stopReap:
				return
			}
		}
	}()
	defer func() {
		signal.Stop(sigc)
		close(stopReap)
		<-reaped
		sv.reap()
	}()

	var tun FrameHandler
	if o.Tunnel != nil {
		tun = o.Tunnel(sv.sendErr)
	}
	// setups runs Setup and Restore in order, off the reader.
	setups := make(chan func(), 16)
	setupsDone := make(chan struct{})
	go func() {
		defer close(setupsDone)
		for f := range setups {
			f()
		}
	}()
	defer func() {
		if tun != nil {
			tun.Close()
		}
		sv.endAll()
		close(setups)
		<-setupsDone
		sv.wg.Wait()
	}()

	readc := make(chan error, 1)
	go func() { readc <- sv.readLoop(ctx, in, tun, setups) }()
	sv.send(FrameReady, 0, nil)
	select {
	case err = <-readc:
	case <-sv.gone:
		err = sv.goneErr
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	return err
}

// readLoop reads and dispatches the host's frames until the stream ends.
func (sv *server) readLoop(ctx context.Context, r io.Reader, tun FrameHandler, setups chan<- func()) error {
	in := bufio.NewReaderSize(r, 64<<10)
	for {
		kind, id, payload, err := ReadFrame(in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the host's requests: %w", err)
		}
		switch kind {
		case FrameExec:
			var m ExecMsg
			if err := m.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: exec: %v", errBadRequest, err)
			}
			c := &serverCall{goc: make(chan struct{}, 1), killc: make(chan struct{})}
			if !sv.track(func() { sv.calls[id] = c }) {
				return nil
			}
			go func() {
				defer sv.wg.Done()
				sv.exec(id, c, m)
			}()
		case FrameArm:
			c := &serverCall{goc: make(chan struct{}, 1), killc: make(chan struct{}), jobs: make(chan func())}
			if !sv.track(func() { sv.calls[id] = c }) {
				return nil
			}
			go func() {
				defer sv.wg.Done()
				sv.arm(id, c)
			}()
		case FrameGo:
			sv.mu.Lock()
			if c := sv.calls[id]; c != nil {
				c.goc <- struct{}{}
			}
			sv.mu.Unlock()
		case FrameKill:
			sv.kill(id)
		case FrameFile:
			var m FileMsg
			if err := m.Unmarshal(payload); err != nil {
				return fmt.Errorf("%w: file: %v", errBadRequest, err)
			}
			if !sv.track(nil) {
				return nil
			}
			go func() {
				defer sv.wg.Done()
				sv.file(id, m)
			}()
		case FrameSetup, FrameRestore, FrameSync:
			f, err := sv.setupRequest(ctx, kind, id, payload)
			if err != nil {
				return err
			}
			queued := false
			sv.mu.Lock()
			if sv.ending {
				sv.mu.Unlock()
				return nil
			}
			select {
			case setups <- f:
				queued = true
			default:
			}
			sv.mu.Unlock()
			if !queued {
				// The host sends one and waits for its answer; a queue
				// this deep is a host that does not.
				sv.sendMsg(FrameFileResult, id, FileResult{Err: "too many setup requests in flight"})
			}
		case FrameDial, FrameData, FrameAck, FrameHangup, FrameReset:
			if tun != nil {
				tun.Frame(kind, id, payload)
			} else if kind == FrameDial {
				go sv.sendErr(FrameReset, id, nil)
			}
		}
	}
}

// setupRequest decodes a FrameSetup, FrameRestore or FrameSync into the
// work that answers it.
func (sv *server) setupRequest(ctx context.Context, kind byte, id uint32, payload []byte) (func(), error) {
	answer := func(err error) {
		var res FileResult
		if err != nil {
			res.Err = err.Error()
		}
		sv.sendMsg(FrameFileResult, id, res)
	}
	if kind == FrameSync {
		if len(payload) != 0 {
			return nil, fmt.Errorf("%w: sync: a payload", errBadRequest)
		}
		return func() {
			// Twice: sync(2) flushes each file system's disk (its
			// sync_fs) before it writes the block devices' own dirty
			// buffers, which on ext4 without a journal are the metadata
			// (directories, inode tables); the second sync's flush is
			// after those writes. A VMM caching its image's metadata
			// (qcow2) writes it out only on a flush, and the host stops
			// the machine right after this answer.
			syscall.Sync()
			syscall.Sync()
			answer(nil)
		}, nil
	}
	if kind == FrameSetup {
		var m SetupMsg
		if err := m.Unmarshal(payload); err != nil {
			return nil, fmt.Errorf("%w: setup: %v", errBadRequest, err)
		}
		return func() {
			if sv.opts.Setup == nil {
				answer(errors.New("this exec server takes no setup request"))
				return
			}
			answer(sv.opts.Setup(ctx, m))
		}, nil
	}
	var m RestoreMsg
	if err := m.Unmarshal(payload); err != nil {
		return nil, fmt.Errorf("%w: restore: %v", errBadRequest, err)
	}
	return func() {
		if sv.opts.Restore == nil {
			answer(errors.New("this exec server takes no restore request"))
			return
		}
		answer(sv.opts.Restore(ctx, m))
	}, nil
}

// endAll kills every call of the session, services included, and, from
// PID 1, every process but itself: the host that could have used them is
// gone.
func (sv *server) endAll() {
	sv.mu.Lock()
	sv.ending = true
	ids := make([]uint32, 0, len(sv.calls))
	for id := range sv.calls {
		ids = append(ids, id)
	}
	sv.mu.Unlock()
	for _, id := range ids {
		sv.kill(id)
	}
	if os.Getpid() == 1 {
		sv.mu.Lock()
		syscall.Kill(-1, syscall.SIGKILL)
		sv.mu.Unlock()
	}
}

// track counts a goroutine of the session (and runs register), under mu,
// unless the session is ending: Serve waits for all it counted.
func (sv *server) track(register func()) bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.ending {
		return false
	}
	if register != nil {
		register()
	}
	sv.wg.Add(1)
	return true
}

// sendErr writes one frame, or says why it cannot (the session is over).
func (sv *server) sendErr(kind byte, id uint32, payload []byte) error {
	sv.wmu.Lock()
	defer sv.wmu.Unlock()
	if sv.goneErr != nil {
		return sv.goneErr
	}
	if err := WriteFrame(sv.out, kind, id, payload); err != nil {
		sv.goneErr = fmt.Errorf("writing to the host: %w", err)
		close(sv.gone)
		return sv.goneErr
	}
	return nil
}

// capDropper returns the func that leaves, on the calling thread (a
// command's forking thread, which ends right after the fork), only the
// capabilities keep in its bounding and inheritable sets and none ambient:
// what a command's capabilities after exec are computed from, even as
// root (whose file capabilities count as full). The server's other threads
// keep all of theirs. Per thread, as ptraceDropper.
func capDropper(keep []int) (func() error, error) {
	last := 40 // CAP_CHECKPOINT_RESTORE, Linux 5.9
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	var keepMask uint64
	for _, c := range keep {
		if c < 0 || c > 63 {
			return nil, fmt.Errorf("capability %d out of range", c)
		}
		keepMask |= 1 << c
	}
	return func() error {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0, 0, 0, 0); e != 0 && e != syscall.EINVAL {
			return fmt.Errorf("clearing the ambient capabilities: %w", e)
		}
		for c := 0; c <= last; c++ {
			if keepMask&(1<<c) != 0 {
				continue
			}
			if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, uintptr(c), 0); e != 0 && e != syscall.EINVAL {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
			}
		}
		hdr := struct {
			version uint32
			pid     int32
		}{version: capVersion3}
		var data [2]struct{ effective, permitted, inheritable uint32 }
		if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
			return fmt.Errorf("reading the thread's capabilities: %w", e)
		}
		data[0].inheritable &= uint32(keepMask)
		data[1].inheritable &= uint32(keepMask >> 32)
		if _, _, e := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
			return fmt.Errorf("dropping inheritable capabilities: %w", e)
		}
		return nil
	}, nil
}

const prCapAmbientClearAll = 4

package landlock

import (
	"context"
	"encoding/json"
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

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

// The holder ("landlock-init") is what a container's runtime keeps between
// commands: started at the sandbox's first command, it is root of the
// sandbox's user namespace and init of its outer PID namespace, holds its
// mount, network, IPC and UTS namespaces, builds the root once (one overlay
// mount: overlayfs misbehaves when one upper directory is mounted twice),
// binds the /etc files, sets the hostname, and runs the egress forwarder.
// Then it only starts launchers when the engine asks, each in a PID and
// mount namespace of its own below it: a command sees neither the holder
// nor another command's or a service's processes (its /proc is its own),
// and its launcher's sweep reaches its own PID namespace only — which is
// why a service, started the same way, outlives the commands around it
// while everything a command starts still dies with it. The sandbox's
// processes reach the holder through nothing: its control socket is a
// close-on-exec descriptor the launchers do not inherit. When the engine
// closes the socket (Close, Snapshot, or the engine's death) the holder
// exits, and with it, init of the outer PID namespace, everything in the
// sandbox dies.

const holderName = "landlock-init"

func init() { reexec.Register(holderName, hold) }

// holderReady is the holder's first message: an error, or which mount
// points it created in the root.
type holderReady struct {
	Error   string   `json:"error,omitempty"`
	Created []string `json:"created,omitempty"`
}

// holderReply answers a start request; a pidfd of the launcher comes with
// it.
type holderReply struct {
	Error string `json:"error,omitempty"`
}

// holder is the engine's end of a running holder.
type holder struct {
	cmd     *exec.Cmd
	ctl     int // SOCK_SEQPACKET control socket
	done    chan struct{}
	stderr  *sandbox.CappedBuffer
	created []string

	mu     sync.Mutex // one request at a time
	closed bool
}

// startHolder starts the sandbox's holder and waits until its root is
// built.
func (s *Sandbox) startHolder(ctx context.Context) (*holder, error) {
	sp, mounts := s.launchSpec()
	sp.EtcDir = s.inLauncher(s.etcDir())
	sp.Hostname = s.hostname
	// fds 3 and 4 are the spec and the control socket; the mounts follow.
	mountFiles, mfds, err := openMounts(mounts, s.nsFile, 5)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range mountFiles {
			f.Close()
		}
	}()
	sp.Mounts = mfds
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ctlChild := os.NewFile(uintptr(pair[1]), "control")
	specR, specW, err := os.Pipe()
	if err != nil {
		unix.Close(pair[0])
		ctlChild.Close()
		return nil, err
	}
	h := &holder{ctl: pair[0], done: make(chan struct{}), stderr: sandbox.NewCappedBuffer(64 << 10)}
	cmd := exec.Command(selfExe)
	cmd.Env = []string{reexec.Env + "=" + holderName}
	cmd.Stdout, cmd.Stderr = h.stderr, h.stderr
	cmd.ExtraFiles = append([]*os.File{specR, ctlChild}, mountFiles...)
	// No Pdeathsig: it fires when the engine's thread that forked exits,
	// which a goroutine locked to its thread can cause at any time. The
	// control socket closes when the engine dies, and the holder exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: launcherNamespaces}
	cmd.WaitDelay = time.Second
	err = s.idmap.Start(cmd, selfExe)
	specR.Close()
	ctlChild.Close()
	if err != nil {
		specW.Close()
		unix.Close(h.ctl)
		return nil, fmt.Errorf("starting the sandbox's init %s: %w", selfExe, err)
	}
	h.cmd = cmd
	go func() {
		cmd.Wait()
		close(h.done)
	}()
	go func() {
		json.NewEncoder(specW).Encode(sp)
		specW.Close()
	}()
	// Killing the holder ends the wait for its first message.
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	var ready holderReady
	if _, err := h.recv(&ready); err != nil {
		h.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("the sandbox's init ended before its root was ready (%v): %s", err, strings.TrimSpace(string(h.stderr.Bytes())))
	}
	if ready.Error != "" {
		h.stop()
		return nil, fmt.Errorf("setting up the sandbox: %s", ready.Error)
	}
	h.created = ready.Created
	return h, nil
}

// recv reads one message into v, with the descriptors that came with it.
func (h *holder) recv(v any) ([]int, error) {
	return recvMsg(h.ctl, v)
}

// start asks the holder to start a launcher with fds as its stdin, stdout,
// stderr, spec and status descriptors and, from fd 5 on, its cgroup.procs
// files, and returns the launcher's pidfd.
func (h *holder) start(fds []*os.File) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return -1, errors.New("the sandbox's init was stopped")
	}
	raw := make([]int, len(fds))
	for i, f := range fds {
		raw[i] = int(f.Fd())
	}
	if err := sendMsg(h.ctl, struct{}{}, raw...); err != nil {
		return -1, fmt.Errorf("asking the sandbox's init for a launcher: %w", err)
	}
	var reply holderReply
	got, err := h.recv(&reply)
	if err != nil {
		return -1, fmt.Errorf("the sandbox's init did not answer (%w): %s", err, strings.TrimSpace(string(h.stderr.Bytes())))
	}
	if reply.Error != "" || len(got) != 1 {
		for _, fd := range got {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("the sandbox's init could not start a launcher: %s", reply.Error)
	}
	return got[0], nil
}

// alive reports whether the holder still runs.
func (h *holder) alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// stop kills the holder, and so everything in the sandbox, and waits.
func (h *holder) stop() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		unix.Close(h.ctl)
	}
	h.mu.Unlock()
	h.cmd.Process.Kill()
	<-h.done
}

// ensureHolder returns the running holder, starting it at the first use.
// A holder that died is an error: the sandbox's services and mounts died
// with it.
func (s *Sandbox) ensureHolder(ctx context.Context) (*holder, error) {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if s.holder != nil {
		if !s.holder.alive() {
			return nil, fmt.Errorf("the sandbox's init has exited (%s): %s", s.holder.cmd.ProcessState, strings.TrimSpace(string(s.holder.stderr.Bytes())))
		}
		return s.holder, nil
	}
	h, err := s.startHolder(ctx)
	if err != nil {
		return nil, err
	}
	s.holder = h
	return h, nil
}

// stopHolder ends the holder and every service, waiting for the services'
// cleanup; the sandbox may start a new holder afterwards (Snapshot and
// Close do not let it).
func (s *Sandbox) stopHolder() (created []string) {
	s.holdMu.Lock()
	h, svcs := s.holder, s.services
	s.holder, s.services = nil, nil
	s.holdMu.Unlock()
	if h != nil {
		h.stop()
		created = h.created
	}
	for _, svc := range svcs {
		svc.kill()
		<-svc.done
	}
	return created
}

// sendMsg sends v as JSON with descriptors fds; recvMsg receives one.
func sendMsg(sock int, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return unix.Sendmsg(sock, b, oob, nil, 0)
}

func recvMsg(sock int, v any) ([]int, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				got, err := unix.ParseUnixRights(&m)
				if err == nil {
					fds = append(fds, got...)
				}
			}
		}
		if n == 0 && len(fds) == 0 {
			return nil, errors.New("connection closed")
		}
		if err := json.Unmarshal(buf[:n], v); err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("bad control message: %w", err)
		}
		return fds, nil
	}
}

// hold is the holder: fd 3 carries the spec, fd 4 is the control socket.
func hold([]string) int {
	cloexecFrom3()
	specF := os.NewFile(3, "spec")
	const ctl = 4
	var sp spec
	err := json.NewDecoder(specF).Decode(&sp)
	specF.Close()
	if err != nil {
		sendMsg(ctl, holderReady{Error: "reading the init's spec: " + err.Error()})
		return 1
	}
	created, err := setUpRoot(sp)
	if err != nil {
		sendMsg(ctl, holderReady{Error: err.Error()})
		return 1
	}
	if err := sendMsg(ctl, holderReady{Created: created}); err != nil {
		return 1
	}
	for {
		var req struct{}
		fds, err := recvMsg(ctl, &req)
		if err != nil {
			// The engine closed the socket (or died): the sandbox ends
			// with this process, init of its PID namespace.
			return 0
		}
		pidfd, err := startLauncher(fds)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err != nil {
			sendMsg(ctl, holderReply{Error: err.Error()})
			continue
		}
		err = sendMsg(ctl, holderReply{}, pidfd)
		unix.Close(pidfd)
		if err != nil {
			return 1
		}
	}
}

// setUpRoot does what the sandbox shares: its network, root, /etc files
// and hostname. It returns the mount points it created in the root.
func setUpRoot(sp spec) ([]string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("making mounts private: %w", err)
	}
	if err := attachMounts(sp.Mounts); err != nil {
		return nil, err
	}
	if err := loopbackUp(); err != nil {
		return nil, err
	}
	if sp.Relay != "" {
		// Dialled through a descriptor: the relay is outside the root
		// the holder pivots into.
		dir, err := unix.Open(filepath.Dir(sp.Relay), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the egress relay: %w", err)
		}
		relay := fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(sp.Relay))
		if err := forward(fmt.Sprintf("127.0.0.1:%d", sp.ProxyPort), relay); err != nil {
			return nil, err
		}
	}
	if err := buildRoot(sp); err != nil {
		return nil, fmt.Errorf("building sandbox root: %w", err)
	}
	etc, err := openEtcSources(sp.EtcDir)
	if err != nil {
		return nil, err
	}
	if err := pivotInto(sp.Root); err != nil {
		return nil, fmt.Errorf("entering the sandbox root: %w", err)
	}
	if err := unix.Sethostname([]byte(sp.Hostname)); err != nil {
		return nil, fmt.Errorf("setting the hostname: %w", err)
	}
	created, err := placeEtcFiles(etc)
	if err != nil {
		return nil, err
	}
	if sp.ReadOnlyRoot {
		if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|lockedFlags("/"), ""); err != nil {
			return nil, fmt.Errorf("making the root read-only: %w", err)
		}
	}
	return created, nil
}

// startLauncher starts a launcher with fds (stdin, stdout, stderr, spec,
// status, cgroup.procs files) in a PID and mount namespace of its own,
// returning its pidfd.
func startLauncher(fds []int) (int, error) {
	if len(fds) < 5 || len(fds) > 8 {
		return -1, fmt.Errorf("want 5 to 8 descriptors, got %d", len(fds))
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		// Duplicated: the caller closes fds.
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		files[i] = os.NewFile(uintptr(d), "fd"+strconv.Itoa(i))
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pidfd := -1
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{reexec.Env + "=" + launcherName}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	cmd.ExtraFiles = files[3:]
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		PidFD:      &pidfd,
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("starting a launcher: %w", err)
	}
	if pidfd < 0 {
		cmd.Process.Kill()
		cmd.Wait()
		return -1, errors.New("starting a launcher: the kernel gave no pidfd")
	}
	go cmd.Wait() // reaped here; the engine watches the pidfd
	return pidfd, nil
}

package execproto

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"
)

// Each command's first process is forked from a thread that has installed
// the sandbox's seccomp filter on itself alone (no TSYNC: the server's other
// threads stay unfiltered) with a listener of its own, so every attempt the
// filter passes up belongs to that command and its descendants. The server
// answers each notification as follows, and never lets through a call the
// plain filter refuses:
//   - a refused syscall (mount, ptrace, …): EPERM, as the plain filter
//     answers, recorded by number (the host names it);
//   - a signal sent to PID 1 (kill, tkill, tgkill, rt_[tg]sigqueueinfo):
//     recorded, and it goes on (continues), as before, to be ignored: the
//     kernel drops SIGKILL and SIGSTOP from inside, the server the rest;
//   - connect, sendto with an address, sendmsg, sendmmsg: the destination is
//     read from the caller's memory and recorded when it is an IP address
//     past loopback, and the call continues (SECCOMP_USER_NOTIF_FLAG_CONTINUE)
//     into the sandbox's network namespace, which has only lo and refuses
//     it (ENETUNREACH) as it did before. The address read may differ from
//     the one the kernel then uses (another thread can rewrite it): that can
//     hide an attempt from the record, never let one through.

// Linux seccomp constants (the same on every architecture).
const (
	seccompSetModeFilter     = 1
	seccompFlagNewListener   = 1 << 3
	seccompIoctlNotifRecv    = 0xc0502100 // _IOWR('!', 0, struct seccomp_notif)
	seccompIoctlNotifSend    = 0xc0182101 // _IOWR('!', 1, struct seccomp_notif_resp)
	seccompIoctlNotifIDValid = 0x40082102 // _IOW('!', 2, __u64)
	seccompUserNotifContinue = 1
	pollIn                   = 0x1
	pollHup                  = 0x10
	cloneNewUser             = 0x10000000
)

// Denial is one kind of attempt the filter refused during a command; Count
// is how many times (identical attempts are counted, not repeated).
type Denial struct {
	Kind string // "syscall" or "network"
	// Syscall is the refused call's number (kind syscall); the host names
	// it for this architecture.
	Syscall int
	Detail  string
	Count   int
}

// maxDenialsPerKind caps the distinct attempts kept per kind; the rest are
// counted in one more entry with an empty Detail and Syscall -1, so a
// command looping on connect cannot flood the result.
const maxDenialsPerKind = 10

type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// installFilter installs prog on the calling thread only, which must be
// locked to its goroutine and end with it, and returns the listener.
func installFilter(prog []byte) (int, error) {
	fprog := struct {
		n      uint16
		_      [6]byte
		filter *byte
	}{n: uint16(len(prog) / 8), filter: &prog[0]}
	fd, _, e := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, seccompFlagNewListener, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return -1, fmt.Errorf("installing the command's seccomp filter: %w", e)
	}
	return int(fd), nil
}

// supervisor answers one command's notifications until stop. The listener
// waits in the runtime's poller, not in a blocking syscall: with one P (the
// server runs with GOMAXPROCS=1) a thread blocked in a syscall holds the P
// until sysmon takes it back, milliseconds later.
type supervisor struct {
	f    *os.File
	fd   int
	done chan struct{}

	mu      sync.Mutex
	denials []Denial
	more    map[string]int
}

func supervise(fd int) (*supervisor, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("seccomp supervisor: %w", err)
	}
	s := &supervisor{f: os.NewFile(uintptr(fd), "seccomp-listener"), fd: fd, done: make(chan struct{}), more: map[string]int{}}
	rc, err := s.f.SyscallConn()
	if err != nil {
		s.f.Close()
		return nil, fmt.Errorf("seccomp supervisor: %w", err)
	}
	go s.loop(rc)
	return s, nil
}

// stop ends the supervisor and returns what it recorded. Processes of the
// command still alive afterwards (none normally: they are killed first)
// get ENOSYS for what the filter passes up: still refused.
func (s *supervisor) stop() []Denial {
	s.f.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.denials
	for _, kind := range []string{"syscall", "network"} {
		if n := s.more[kind]; n > 0 {
			out = append(out, Denial{Kind: kind, Syscall: -1, Count: n})
		}
	}
	return out
}

// loop answers notifications as the poller reports them (edge-triggered:
// each wakeup drains all pending) until the listener is closed or no
// process uses the filter any more.
func (s *supervisor) loop(rc syscall.RawConn) {
	defer close(s.done)
	ended := false
	for !ended {
		err := rc.Read(func(fd uintptr) bool {
			for {
				fds := []pollFd{{fd: int32(fd), events: pollIn}}
				var zero syscall.Timespec
				_, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
				switch {
				case e == syscall.EINTR:
				case e != 0:
					ended = true
					return true
				case fds[0].revents&pollIn != 0:
					s.handle()
				case fds[0].revents&pollHup != 0:
					ended = true
					return true
				default:
					return false // wait for the next notification
				}
			}
		})
		if err != nil {
			return // closed by stop
		}
	}
}

func (s *supervisor) handle() {
	var n seccompNotif
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s.fd), seccompIoctlNotifRecv, uintptr(unsafe.Pointer(&n))); e != 0 {
		return // the caller died or was interrupted (ENOENT), or EINTR
	}
	resp := seccompResp{id: n.id, error: -int32(syscall.EPERM)}
	switch nr := int(n.nr); {
	case isNetworkCall(nr):
		resp.error, resp.flags = 0, seccompUserNotifContinue
		if what, dest, ok := destination(int(n.pid), nr, n.args); ok && s.valid(n.id) && !dest.Addr().Unmap().IsLoopback() && !dest.Addr().Unmap().IsUnspecified() {
			s.record(Denial{Kind: "network", Detail: what + " " + dest.String()})
		}
	case nr == syscall.SYS_KILL || nr == syscall.SYS_TKILL || nr == syscall.SYS_RT_SIGQUEUEINFO:
		// Aimed at PID 1 (the filter passes up no other): goes on, to be
		// ignored; signal 0 only asks whether it exists.
		resp.error, resp.flags = 0, seccompUserNotifContinue
		if n.args[1] != 0 {
			s.record(Denial{Kind: "syscall", Syscall: nr, Detail: "1, " + strconv.FormatUint(n.args[1], 10)})
		}
	case nr == syscall.SYS_TGKILL || nr == syscall.SYS_RT_TGSIGQUEUEINFO:
		resp.error, resp.flags = 0, seccompUserNotifContinue
		if n.args[2] != 0 {
			s.record(Denial{Kind: "syscall", Syscall: nr, Detail: "1, " + strconv.FormatUint(n.args[1], 10) + ", " + strconv.FormatUint(n.args[2], 10)})
		}
	case nr == syscall.SYS_CLONE || nr == syscall.SYS_UNSHARE:
		detail := ""
		if n.args[0]&cloneNewUser != 0 {
			detail = "CLONE_NEWUSER"
		}
		s.record(Denial{Kind: "syscall", Syscall: nr, Detail: detail})
	default:
		s.record(Denial{Kind: "syscall", Syscall: nr})
	}
	syscall.Syscall(syscall.SYS_IOCTL, uintptr(s.fd), seccompIoctlNotifSend, uintptr(unsafe.Pointer(&resp)))
}

// valid says the notification's caller is still waiting in that call, so
// what was read from its memory was its own (its pid not reused).
func (s *supervisor) valid(id uint64) bool {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s.fd), seccompIoctlNotifIDValid, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

func (s *supervisor) record(d Denial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := 0
	for i := range s.denials {
		if s.denials[i].Kind != d.Kind {
			continue
		}
		if s.denials[i].Syscall == d.Syscall && s.denials[i].Detail == d.Detail {
			s.denials[i].Count++
			return
		}
		kept++
	}
	if kept >= maxDenialsPerKind {
		s.more[d.Kind]++
		return
	}
	d.Count = 1
	s.denials = append(s.denials, d)
}

func isNetworkCall(nr int) bool {
	return nr == syscall.SYS_CONNECT || nr == syscall.SYS_SENDTO || nr == syscall.SYS_SENDMSG || nr == sysSendmmsg
}

// maxMmsgs bounds how many messages of one sendmmsg are looked at.
const maxMmsgs = 16

// destination reads the IP destination a network call names from the
// memory of thread tid (through /proc, with the server's CAP_SYS_PTRACE
// inside the sandbox's user namespace, which its commands lack); ok is
// false when it names none or cannot be read. For sendmmsg the first
// message past loopback counts.
func destination(tid, nr int, args [6]uint64) (what string, dest netip.AddrPort, ok bool) {
	mem, err := os.Open("/proc/" + strconv.Itoa(tid) + "/mem")
	if err != nil {
		return "", netip.AddrPort{}, false
	}
	defer mem.Close()
	read := func(addr uint64, n int) []byte {
		if addr == 0 || n <= 0 {
			return nil
		}
		b := make([]byte, n)
		if k, err := mem.ReadAt(b, int64(addr)); err != nil || k != n {
			return nil
		}
		return b
	}
	sockaddr := func(addr, n uint64) (netip.AddrPort, bool) {
		return parseSockaddr(read(addr, int(min(n, 128))))
	}
	// msghdr starts with msg_name (pointer) and msg_namelen (u32).
	msgName := func(hdr uint64) (netip.AddrPort, bool) {
		b := read(hdr, 12)
		if b == nil {
			return netip.AddrPort{}, false
		}
		return sockaddr(binary.NativeEndian.Uint64(b), uint64(binary.NativeEndian.Uint32(b[8:])))
	}
	switch nr {
	case syscall.SYS_CONNECT:
		dest, ok = sockaddr(args[1], args[2])
		return "connect to", dest, ok
	case syscall.SYS_SENDTO:
		dest, ok = sockaddr(args[4], args[5])
		return "sendto", dest, ok
	case syscall.SYS_SENDMSG:
		dest, ok = msgName(args[1])
		return "sendmsg to", dest, ok
	case sysSendmmsg:
		// struct mmsghdr is a msghdr (56 bytes) and a u32, padded to 64.
		for i := range min(args[2], maxMmsgs) {
			if d, ok := msgName(args[1] + 64*i); ok && !d.Addr().Unmap().IsLoopback() && !d.Addr().Unmap().IsUnspecified() {
				return "sendmmsg to", d, true
			}
		}
	}
	return "", netip.AddrPort{}, false
}

// parseSockaddr reads a struct sockaddr_in or sockaddr_in6 (ports in
// network order); other families name no IP destination.
func parseSockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < 2 {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(b) {
	case syscall.AF_INET:
		if len(b) >= 8 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), true
		}
	case syscall.AF_INET6:
		if len(b) >= 24 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:])), true
		}
	}
	return netip.AddrPort{}, false
}

package landlock

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// What the seccomp filter refuses, the trajectory shows: the refusals go
// to the launcher as seccomp user notifications (the restricter passes it
// the filter's listener), which answers each with the errno the filter
// would have returned and counts it; the counts become the command's
// denials. connect(2) under deny and allowlist is notified too, to see the
// address: the launcher lets through AF_UNIX and loopback (the sandbox's
// own services, the forwarder) and refuses, and records, the rest. The
// address is read from the caller's memory, which it could change before
// the kernel reads it again; that is harmless because the network
// namespace, which holds only loopback, is what contains: this answer only
// makes the attempt visible.

// seccompNotif and seccompNotifResp are struct seccomp_notif and
// seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// supervisor answers a filter's notifications and counts the refusals.
type supervisor struct {
	fd        int
	procRoot  string // the sandbox's /proc, where its pids are
	proxyPort uint16
	allowlist bool

	mu      sync.Mutex
	refused map[sandbox.Denial]int
}

// supervise serves the listener fd until stop is closed.
func supervise(fd int, procRoot string, proxyPort uint16, allowlist bool) *supervisor {
	return &supervisor{fd: fd, procRoot: procRoot, proxyPort: proxyPort, allowlist: allowlist, refused: map[sandbox.Denial]int{}}
}

func (s *supervisor) run(stop <-chan struct{}) {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		var req seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
			continue // the caller died meanwhile
		}
		resp := seccompNotifResp{ID: req.ID}
		if d, errno, refuse := s.judge(&req); refuse {
			resp.Error = -int32(errno)
			s.mu.Lock()
			s.refused[d]++
			s.mu.Unlock()
		} else {
			resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		}
		unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}

// judge says whether to refuse a call, with which errno, and how to
// record it.
func (s *supervisor) judge(req *seccompNotif) (sandbox.Denial, unix.Errno, bool) {
	switch req.Nr {
	case unix.SYS_PTRACE:
		return sandbox.Denial{Kind: "syscall", Detail: "ptrace refused (seccomp)"}, unix.EPERM, true
	case unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_FSMOUNT, unix.SYS_OPEN_TREE:
		return sandbox.Denial{Kind: "syscall", Detail: "mount refused (seccomp; Landlock forbids mounts too)"}, unix.EPERM, true
	case unix.SYS_SOCKET:
		return sandbox.Denial{Kind: "network", Detail: "socket " + socketName(req.Args[0], req.Args[1]) + " refused (only TCP, unix and netlink sockets)"}, unix.EACCES, true
	case unix.SYS_CONNECT:
		return s.judgeConnect(req)
	}
	return sandbox.Denial{}, 0, false
}

func (s *supervisor) judgeConnect(req *seccompNotif) (sandbox.Denial, unix.Errno, bool) {
	size := int(req.Args[2])
	if size < 2 || size > 128 {
		return sandbox.Denial{}, 0, false // let the kernel judge (and Landlock)
	}
	buf := make([]byte, size)
	mem, err := os.Open(s.procRoot + "/" + strconv.Itoa(int(req.PID)) + "/mem")
	if err != nil {
		return sandbox.Denial{}, 0, false
	}
	_, err = mem.ReadAt(buf, int64(req.Args[1]))
	mem.Close()
	if err != nil {
		return sandbox.Denial{}, 0, false
	}
	var addr string
	switch family := binary.NativeEndian.Uint16(buf); family {
	case unix.AF_INET:
		if size < 8 {
			return sandbox.Denial{}, 0, false
		}
		port := binary.BigEndian.Uint16(buf[2:4])
		ip := net.IP(buf[4:8])
		if ip.IsLoopback() {
			return sandbox.Denial{}, 0, false
		}
		addr = net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
	case unix.AF_INET6:
		if size < 24 {
			return sandbox.Denial{}, 0, false
		}
		port := binary.BigEndian.Uint16(buf[2:4])
		ip := net.IP(buf[8:24])
		if ip.IsLoopback() {
			return sandbox.Denial{}, 0, false
		}
		addr = net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
	default:
		return sandbox.Denial{}, 0, false // unix, netlink: not the network
	}
	what := "network deny"
	if s.allowlist {
		what = "network allowlist: only the egress proxy at 127.0.0.1:" + strconv.Itoa(int(s.proxyPort))
	}
	return sandbox.Denial{Kind: "network", Detail: "TCP connect to " + addr + " refused (" + what + ")"}, unix.EACCES, true
}

// denials are the refusals so far, each with its count.
func (s *supervisor) denials() []sandbox.Denial {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sandbox.Denial
	for d, n := range s.refused {
		if n > 1 {
			d.Detail += fmt.Sprintf(" ×%d", n)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].Detail < out[j].Kind+out[j].Detail })
	return out
}

func socketName(family, typ uint64) string {
	f := map[uint64]string{unix.AF_INET: "AF_INET", unix.AF_INET6: "AF_INET6", unix.AF_PACKET: "AF_PACKET"}[family]
	if f == "" {
		f = "family " + strconv.FormatUint(family, 10)
	}
	t := map[uint64]string{unix.SOCK_STREAM: "SOCK_STREAM", unix.SOCK_DGRAM: "SOCK_DGRAM (UDP, DNS)", unix.SOCK_RAW: "SOCK_RAW"}[typ&0xf]
	if t == "" {
		t = "type " + strconv.FormatUint(typ&0xf, 10)
	}
	return "(" + f + ", " + t + ")"
}

// sendFD passes fd over the unix socket sock; recvFD receives it.
func sendFD(sock, fd int) error {
	return unix.Sendmsg(sock, []byte{0}, unix.UnixRights(fd), nil, 0)
}

func recvFD(sock int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, 0)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no descriptor received (%v)", err)
	}
	return fds[0], nil
}

// Package nethost gives tests a host of their own to reach over a network
// that never leaves the machine: a network namespace the test creates, joined
// to the host's by a veth pair with addresses in 198.18.0.0/15 (the range
// reserved for benchmarking network devices), and an HTTP listener inside it
// that counts what it served. Sandboxes with outbound access reach it the way
// they would reach the internet; sandboxes without it must not. Test support
// only; it needs root and iproute2.
package nethost

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

// Host is a test host in its own network namespace.
type Host struct {
	// Addr is its listener, "198.18.X.Y:PORT" (NewSharedSpace:
	// "100.64.X.Y:PORT"); Body is what it serves.
	Addr  string
	Body  string
	hits  atomic.Int64
	conns atomic.Int64
}

// Hits counts the requests the host has answered.
func (h *Host) Hits() int { return int(h.hits.Load()) }

// Conns counts the TCP connections the host has accepted.
func (h *Host) Conns() int { return int(h.conns.Load()) }

// New makes a test host and removes it when the test ends. A machine without
// root or iproute2 reports the facility missing.
func New(t testing.TB) *Host { return NewHandler(t, nil) }

// NewHandler is New with handler serving the host's requests instead of
// Body (nil: Body).
func NewHandler(t testing.TB, handler http.Handler) *Host {
	t.Helper()
	return newHost(t, handler, "198.18")
}

// NewSharedSpace is New with the veth pair in 100.64.0.0/10, the shared
// address space (RFC 6598) of carrier-grade NAT and of cloud providers'
// internal services: a host that network: allow must refuse, as it would
// a metadata endpoint or another machine of the cluster's network.
func NewSharedSpace(t testing.TB) *Host {
	t.Helper()
	return newHost(t, nil, "100.64")
}

// newHost makes a host whose veth pair is a /30 of net16 (the first two
// octets), from a random id.
func newHost(t testing.TB, handler http.Handler, net16 string) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "test network namespace", "making one needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "iproute2", "ip is not installed (apt-get install iproute2)")
	}
	b := make([]byte, 4)
	rand.Read(b)
	id := hex.EncodeToString(b)
	ns, hostIf, peerIf := "evalsi-th-"+id, "evth"+id, "evtp"+id
	// One /30 per host, from the random id.
	third := int(b[0])%254 + 1
	hostIP, peerIP := fmt.Sprintf("%s.%d.%d", net16, third, 4*(int(b[1])%63)+1), ""
	{
		ip := net.ParseIP(hostIP).To4()
		peerIP = net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("making a test host: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("link", "add", hostIf, "type", "veth", "peer", "name", peerIf, "netns", ns)
	run("addr", "add", hostIP+"/30", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", ns, "addr", "add", peerIP+"/30", "dev", peerIf)
	run("-n", ns, "link", "set", peerIf, "up")
	run("-n", ns, "link", "set", "lo", "up")

	ln, err := listenIn("/run/netns/"+ns, peerIP+":0")
	if err != nil {
		t.Fatalf("making a test host: %v", err)
	}
	h := &Host{Addr: ln.Addr().String(), Body: "EVALSI-TEST-HOST-" + id}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		if handler != nil {
			handler.ServeHTTP(w, r)
			return
		}
		fmt.Fprint(w, h.Body)
	}), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			h.conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

// listenIn opens a TCP listener inside the network namespace at nsPath: a
// socket belongs to the namespace it was made in, whichever thread serves it
// later. It switches a thread of its own goroutine, which ends locked (so
// the runtime retires the thread) should switching back fail.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			c <- result{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			c <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			c <- result{err: fmt.Errorf("entering %s: %w", nsPath, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		c <- result{ln, err}
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-c
	return r.ln, r.err
}

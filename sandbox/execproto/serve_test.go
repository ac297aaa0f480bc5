package execproto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox/limits"
)

// session runs Serve over two pipes with a Client as the host.
type session struct {
	client *Client
	hostW  *os.File // the host's end of the requests: closing it ends the session
	served chan error
}

func startSession(t *testing.T, o ServeOptions, co ClientOptions) *session {
	t.Helper()
	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{hostW: reqW, served: make(chan error, 1)}
	go func() {
		s.served <- Serve(context.Background(), reqR, respW, o)
		respW.Close()
		reqR.Close()
	}()
	s.client = NewClient(respR, reqW, co)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.client.WaitReady(ctx); err != nil {
		t.Fatalf("waiting for FrameReady: %v", err)
	}
	t.Cleanup(func() {
		s.hostW.Close()
		select {
		case <-s.served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after the host closed the stream")
		}
		respR.Close()
	})
	return s
}

// result is one command's outcome.
type result struct {
	stdout, stderr string
	exit           ExitMsg
	done           DoneMsg
}

func (s *session) run(t *testing.T, m ExecMsg) result {
	t.Helper()
	var mu sync.Mutex
	var out, errb bytes.Buffer
	call, err := s.client.Start(m, func(p []byte) { mu.Lock(); out.Write(p); mu.Unlock() }, func(p []byte) { mu.Lock(); errb.Write(p); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer s.client.Forget(call)
	var r result
	select {
	case r.exit = <-call.Exit:
	case <-time.After(20 * time.Second):
		t.Fatalf("%q: no exit status", m.Argv)
	}
	select {
	case r.done = <-call.Done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%q: never done", m.Argv)
	}
	mu.Lock()
	r.stdout, r.stderr = out.String(), errb.String()
	mu.Unlock()
	return r
}

func sh(script string) ExecMsg {
	return ExecMsg{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Limit: 1 << 20}
}

func TestServeRunsCommands(t *testing.T) {
	s := startSession(t, ServeOptions{}, ClientOptions{})
	tests := []struct {
		name            string
		m               ExecMsg
		stdout, stderr  string
		code            int
		setup           string
		truncatedStdout bool
	}{
		{"output and status", sh("echo out; echo err >&2; exit 3"), "out\n", "err\n", 3, "", false},
		{"stdin", ExecMsg{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Stdin: []byte("fed"), Limit: 100}, "fed", "", 0, "", false},
		{"limit", ExecMsg{Argv: []string{"sh", "-c", "echo 0123456789"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Limit: 4}, "0123", "", 0, "", true},
		{"missing program", ExecMsg{Argv: []string{"no-such-program-here"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Limit: 100}, "", "evalsi: execvp no-such-program-here: No such file or directory\n", 127, "", false},
		{"missing workdir", ExecMsg{Argv: []string{"true"}, Dir: "/no/such/dir", Limit: 100}, "", "", 0, "workdir /no/such/dir: not a directory", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.run(t, tt.m)
			if r.stdout != tt.stdout || r.stderr != tt.stderr || r.exit.Code != tt.code {
				t.Errorf("got stdout %q stderr %q code %d, want %q %q %d", r.stdout, r.stderr, r.exit.Code, tt.stdout, tt.stderr, tt.code)
			}
			if !strings.HasPrefix(r.exit.Setup, tt.setup) || (tt.setup == "") != (r.exit.Setup == "") {
				t.Errorf("setup error %q, want one starting %q", r.exit.Setup, tt.setup)
			}
			if r.done.TruncatedStdout != tt.truncatedStdout {
				t.Errorf("truncated stdout %v, want %v", r.done.TruncatedStdout, tt.truncatedStdout)
			}
		})
	}
}

func TestServeSetupAndRestore(t *testing.T) {
	var mu sync.Mutex
	var got []string
	o := ServeOptions{
		Setup: func(ctx context.Context, m SetupMsg) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, "setup "+m.Workdir)
			if m.Hostname == "bad" {
				return errors.New("hostname refused")
			}
			return nil
		},
		Restore: func(ctx context.Context, m RestoreMsg) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("restore %d %x", m.UnixNano, m.Seed))
			return nil
		},
	}
	s := startSession(t, o, ClientOptions{})
	none := startSession(t, ServeOptions{}, ClientOptions{})
	ctx := context.Background()
	tests := []struct {
		name    string
		s       *session
		kind    byte
		payload []byte
		err     string
	}{
		{"setup", s, FrameSetup, SetupMsg{Workdir: "/w", Hostname: "h"}.Marshal(), ""},
		{"setup refused", s, FrameSetup, SetupMsg{Workdir: "/x", Hostname: "bad"}.Marshal(), "hostname refused"},
		{"restore", s, FrameRestore, RestoreMsg{UnixNano: 42, Seed: []byte{1, 2}}.Marshal(), ""},
		{"no setup handler", none, FrameSetup, SetupMsg{}.Marshal(), "this exec server takes no setup request"},
		{"no restore handler", none, FrameRestore, RestoreMsg{}.Marshal(), "this exec server takes no restore request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.s.client.Request(ctx, tt.kind, tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if res.Err != tt.err {
				t.Errorf("result error %q, want %q", res.Err, tt.err)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"setup /w", "setup /x", "restore 42 0102"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("handlers saw %q, want %q", got, want)
	}
}

// TestServeEndKillsCalls: when the host's stream ends, Serve kills the
// commands and services still running and returns.
func TestServeEndKillsCalls(t *testing.T) {
	s := startSession(t, ServeOptions{}, ClientOptions{})
	pids := make(chan int, 2)
	for _, service := range []bool{false, true} {
		m := sh("echo $$; exec sleep 1000")
		m.Service = service
		var once sync.Once
		if _, err := s.client.Start(m, func(p []byte) {
			once.Do(func() {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(p)))
				pids <- pid
			})
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var started []int
	for range 2 {
		select {
		case pid := <-pids:
			started = append(started, pid)
		case <-time.After(10 * time.Second):
			t.Fatal("the commands never started")
		}
	}
	s.hostW.Close()
	select {
	case err := <-s.served:
		if err != nil {
			t.Errorf("Serve after the host closed: %v, want nil", err)
		}
		s.served <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	for _, pid := range started {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still alive after the session ended", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestServeBadRequest(t *testing.T) {
	reqR, reqW, _ := os.Pipe()
	respR, respW, _ := os.Pipe()
	defer reqW.Close()
	defer respR.Close()
	go io.Copy(io.Discard, respR)
	WriteFrame(reqW, FrameExec, 1, []byte{0xff})
	err := Serve(context.Background(), reqR, respW, ServeOptions{})
	if !errors.Is(err, errBadRequest) {
		t.Errorf("Serve of a malformed request: %v, want a bad request", err)
	}
}

// TestServeConfinement: Confine is asked before each command; its Join
// is called right before the fork and its leave right after; its Finish's
// denials reach DoneMsg, for commands and services, and when a command
// cannot start. A Join that fails is a setup error.
func TestServeConfinement(t *testing.T) {
	var mu sync.Mutex
	asked, joined, left, finished := 0, 0, 0, 0
	o := ServeOptions{Confine: func(service bool) (Confinement, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return Confinement{
			Join: func() (func(), error) {
				mu.Lock()
				defer mu.Unlock()
				joined++
				return func() { mu.Lock(); left++; mu.Unlock() }, nil
			},
			Finish: func() []Denial {
				mu.Lock()
				defer mu.Unlock()
				finished++
				return []Denial{{Kind: "oom", Syscall: -1, Detail: fmt.Sprintf("service %v", service)}}
			},
		}, nil
	}}
	s := startSession(t, o, ClientOptions{})
	for _, tt := range []struct {
		m    ExecMsg
		want string
	}{
		{sh("true"), "service false"},
		{func() ExecMsg { m := sh("echo svc"); m.Service = true; return m }(), "service true"},
	} {
		r := s.run(t, tt.m)
		if len(r.done.Denials) != 1 || r.done.Denials[0].Detail != tt.want || r.done.Denials[0].Kind != "oom" {
			t.Errorf("%q: denials %+v, want the confinement's %q", tt.m.Argv, r.done.Denials, tt.want)
		}
	}
	refuse := startSession(t, ServeOptions{Confine: func(bool) (Confinement, error) { return Confinement{}, errors.New("no cgroup") }}, ClientOptions{})
	if r := refuse.run(t, sh("true")); r.exit.Setup != "confining the command: no cgroup" {
		t.Errorf("setup error %q, want the confinement's", r.exit.Setup)
	}
	finishedFailed := false
	noJoin := startSession(t, ServeOptions{Confine: func(bool) (Confinement, error) {
		return Confinement{
			Join:   func() (func(), error) { return nil, errors.New("cgroup gone") },
			Finish: func() []Denial { finishedFailed = true; return nil },
		}, nil
	}}, ClientOptions{})
	if r := noJoin.run(t, sh("echo ran")); r.exit.Setup != "joining the command's cgroup: cgroup gone" || r.stdout != "" {
		t.Errorf("a failed join: setup error %q, output %q; want the join's error and no run", r.exit.Setup, r.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 2 || joined != 2 || left != 2 || finished != 2 || !finishedFailed {
		t.Errorf("Confine asked %d times, Join %d, leave %d, Finish %d (and after a failed join: %v), want 2, 2, 2, 2 (true)", asked, joined, left, finished, finishedFailed)
	}
}

// TestServeSeccomp: with ServeOptions.Seccomp (the bwrap rung's filter),
// what it refuses comes back as a denial, named by number, for commands
// and services; a Join still runs under it.
func TestServeSeccomp(t *testing.T) {
	if !hasCap(capSysAdmin) {
		testenv.Missing(t, "CAP_SYS_ADMIN", "installing a seccomp filter without no_new_privs needs it, as in a guest")
	}
	filter, err := limits.SeccompNotifyFilter()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var modes []string
	o := ServeOptions{Seccomp: filter, Confine: func(bool) (Confinement, error) {
		return Confinement{Join: func() (func(), error) {
			// The forking thread, which has its filter by now.
			b, err := os.ReadFile("/proc/thread-self/status")
			mode := "unreadable"
			if err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
						mode = strings.TrimSpace(v)
					}
				}
			}
			mu.Lock()
			modes = append(modes, mode)
			mu.Unlock()
			return func() {}, nil
		}}, nil
	}}
	s := startSession(t, o, ClientOptions{})
	unshare := sh("unshare -U true; echo $?")
	service := sh("unshare -U true; echo $?")
	service.Service = true
	for _, tt := range []struct {
		name string
		m    ExecMsg
	}{{"command", unshare}, {"service", service}} {
		t.Run(tt.name, func(t *testing.T) {
			r := s.run(t, tt.m)
			if strings.TrimSpace(r.stdout) == "0" {
				t.Errorf("unshare -U succeeded under the filter (stderr %q)", r.stderr)
			}
			want := Denial{Kind: "syscall", Syscall: syscall.SYS_UNSHARE, Detail: "CLONE_NEWUSER", Count: 1}
			if len(r.done.Denials) != 1 || r.done.Denials[0] != want {
				t.Errorf("denials %+v, want [%+v]", r.done.Denials, want)
			}
		})
	}
	if r := s.run(t, sh("grep ^Seccomp: /proc/self/status")); r.stdout != "Seccomp:\t2\n" {
		t.Errorf("a command's seccomp mode: %q, want filter mode (2)", r.stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(modes, " ") != "2 2 2" {
		t.Errorf("the forking thread's seccomp mode at each Join: %q, want 2 (filter) each time", modes)
	}
}

// TestServeKeepCaps: a command forked as root holds only KeepCaps in its
// bounding set and effectively, while the server keeps its own.
func TestServeKeepCaps(t *testing.T) {
	if os.Getuid() != 0 || !hasCap(capSetpcap) {
		testenv.Missing(t, "root with CAP_SETPCAP", "dropping from the bounding set needs it")
	}
	s := startSession(t, ServeOptions{KeepCaps: []int{0, 7}}, ClientOptions{}) // CAP_CHOWN, CAP_SETUID
	r := s.run(t, sh("grep -E '^Cap(Bnd|Eff|Inh|Amb)' /proc/self/status"))
	want := "CapInh:\t0000000000000000\nCapEff:\t0000000000000081\nCapBnd:\t0000000000000081\nCapAmb:\t0000000000000000\n"
	if r.stdout != want {
		t.Errorf("a command's capabilities:\n%s\nwant\n%s", r.stdout, want)
	}
	if !hasCap(capSysAdmin) {
		t.Error("the server lost CAP_SYS_ADMIN: the drop was not confined to the forking thread")
	}
}

const (
	capSetpcap  = 8
	capSysAdmin = 21
)

// TestServeServiceWrapper: a service's program goes through
// ServeOptions.Service; commands' do not.
func TestServeServiceWrapper(t *testing.T) {
	o := ServeOptions{Service: func(bin string, argv []string) (string, []string) {
		return "/bin/sh", append([]string{"sh", "-c", `echo wrapped "$0"; exec "$0" "$@"`, bin}, argv[1:]...)
	}}
	s := startSession(t, o, ClientOptions{})
	m := ExecMsg{Argv: []string{"echo", "hi"}, Env: []string{"PATH=/bin"}, Dir: "/", Limit: 100, Service: true}
	if r := s.run(t, m); r.stdout != "wrapped /bin/echo\nhi\n" {
		t.Errorf("service output %q", r.stdout)
	}
	m.Service = false
	if r := s.run(t, m); r.stdout != "hi\n" {
		t.Errorf("command output %q", r.stdout)
	}
}

// TestServeTunnel: a guest's tunnel through Serve and a host Client: a
// connection opened on the server's side reaches the host's proxy.
func TestServeTunnel(t *testing.T) {
	proxy := listen(t, echo)
	var guest *Tunnel
	made := make(chan struct{})
	o := ServeOptions{Tunnel: func(send TunnelSend) FrameHandler {
		guest = NewTunnel(send, nil)
		close(made)
		return guest
	}}
	var host *Tunnel
	hostReady := make(chan struct{})
	s := startSession(t, o, ClientOptions{Tunnel: func(k byte, id uint32, p []byte) { <-hostReady; host.Frame(k, id, p) }})
	host = NewTunnel(s.client.Send, dialTo(proxy.Addr().String()))
	close(hostReady)
	defer host.Close()
	<-made
	a, b := net.Pipe()
	if err := guest.Open(b); err != nil {
		t.Fatal(err)
	}
	go a.Write([]byte("through the control stream"))
	buf := make([]byte, len("through the control stream"))
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "through the control stream" {
		t.Errorf("echo through the tunnel: %q, %v", buf, err)
	}
	a.Close()
}

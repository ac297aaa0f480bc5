package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/engine"
	"evals.si/internal/testenv"
	"evals.si/internal/testenv/nethost"
	"evals.si/internal/testenv/vmtest"
	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
	"evals.si/spec"
	"evals.si/store"
	"evals.si/trajectory"
)

// The escape suite through the engine: every class of hole a hostile review
// found, attacked by a scripted agent's tool calls in a real run spec
// (`evalsi run` as a user would start it), on every rung. A row passes when
// the attack was contained; a rung declares what it does not contain, with
// why, and the suite logs an honest table (docs/security.md is made from
// it).

// escapeCase is one record of the escape run: its tool calls, its record's
// environment (tightening the spec's), and how to tell it was contained.
type escapeCase struct {
	id, attack string
	env        map[string]any // metadata.environment
	calls      []toolCall
	// check says whether the attack was contained, with the evidence.
	check func(v *trialView) (bool, string)
}

type toolCall struct {
	name string
	args map[string]any
}

func bash(cmd string) toolCall { return toolCall{"bash", map[string]any{"command": cmd}} }
func readFile(p string) toolCall {
	return toolCall{"read_file", map[string]any{"path": p}}
}
func writeFile(p, content string) toolCall {
	return toolCall{"write_file", map[string]any{"path": p, "content": content}}
}

// trialView is what a finished trial left in the store.
type trialView struct {
	trial    store.Trial
	events   []trajectory.Event
	results  []trajectory.ToolResult
	policies []trajectory.Policy
	scores   map[string]float64
	report   sandbox.Report
	diff     string
}

func (v *trialView) output() string {
	var b strings.Builder
	for _, r := range v.results {
		b.WriteString(r.Output)
		b.WriteString("\n")
	}
	return b.String()
}

func (v *trialView) hasPolicy(kind string) bool {
	return slices.ContainsFunc(v.policies, func(p trajectory.Policy) bool { return p.Kind == kind })
}

func (v *trialView) finished() (bool, string) {
	if v.trial.Status != store.TrialFinished {
		return false, fmt.Sprintf("trial %s (%s: %s)", v.trial.Status, v.trial.ErrorKind, v.trial.Error)
	}
	return true, ""
}

// fixtures are the host-side targets the attacks aim at.
type fixtures struct {
	canaryDir, canary string
	secret            string
	marker            string // source name of a tmpfs mounted on the host only
	listeners         map[string]*countingListener
	hosts             map[string]*nethost.Host
}

const escapeCanary = "EVALSI-ENGINE-CANARY-5d1e"

// countingListener is an HTTP server on the host's loopback that counts the
// connections it accepted.
type countingListener struct {
	addr, body string
	conns      atomic.Int64
}

func (fx *fixtures) listener(t *testing.T, name string) *countingListener {
	if l, ok := fx.listeners[name]; ok {
		return l
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{addr: ln.Addr().String(), body: "EVALSI-LOOPBACK-" + strings.ToUpper(name)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, l.body) }),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				l.conns.Add(1)
			}
		}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	fx.listeners[name] = l
	return l
}

func (fx *fixtures) host(t *testing.T, name string) *nethost.Host {
	if h, ok := fx.hosts[name]; ok {
		return h
	}
	h := nethost.New(t)
	fx.hosts[name] = h
	return h
}

// fetch is a python3 command that GETs url through the sandbox's
// HTTP(S)_PROXY (when set) and prints the body, or the error.
func fetch(url string) string {
	return fmt.Sprintf(`python3 -c "import urllib.request as u
try: print('GOT', u.urlopen('%s', timeout=5).read().decode())
except Exception as e: print('FAILED', e)"`, url)
}

// connect is a python3 command that opens a TCP connection to addr
// directly, without a proxy.
func connect(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf(`python3 -c "import socket
try: socket.create_connection(('%s', %s), 3).sendall(b'GET / HTTP/1.0\r\n\r\n'); print('CONNECTED')
except Exception as e: print('REFUSED', e)"`, host, port)
}

// checkerFile passes only when the agent wrote done.txt with "ok".
const checkerFile = "import sys\ntry:\n    ok = open('done.txt').read().strip() == 'ok'\nexcept OSError:\n    ok = False\nsys.exit(0 if ok else 1)\n"

func escapeCases(t *testing.T, fx *fixtures) []escapeCase {
	notIn := func(out string, bad ...string) (bool, string) {
		for _, b := range bad {
			if strings.Contains(out, b) {
				return false, fmt.Sprintf("output has %q: %.300s", b, out)
			}
		}
		return true, fmt.Sprintf("%.200s", strings.TrimSpace(out))
	}
	// Allowlisted hosts are test hosts off this machine's own addresses:
	// the spec's network: allow refuses those, so a record could not list
	// them (TestEscapeRecordCannotLoosenPolicy).
	allowed1, allowed2 := fx.host(t, "allowed-1"), fx.host(t, "allowed-2")
	// A host on a private network: the shared address space of CGNAT,
	// where cloud metadata and VPC services live, and its NAT64 spelling.
	private := nethost.NewSharedSpace(t)
	privateIP, privatePort, _ := net.SplitHostPort(private.Addr)
	v4 := net.ParseIP(privateIP).To4()
	privateNAT64 := net.JoinHostPort(fmt.Sprintf("64:ff9b::%x:%x", uint16(v4[0])<<8|uint16(v4[1]), uint16(v4[2])<<8|uint16(v4[3])), privatePort)
	return []escapeCase{
		{id: "uid-map", attack: "root inside is root outside: /proc/self/uid_map and the isolation report",
			calls: []toolCall{bash("cat /proc/self/uid_map; id -u")},
			check: func(v *trialView) (bool, string) {
				out := v.output()
				for _, line := range strings.Split(out, "\n") {
					f := strings.Fields(line)
					if len(f) == 3 && f[0] == "0" {
						if f[1] == "0" && v.report.Isolation == sandbox.LevelVM {
							// A guest's ids are its own kernel's: the
							// identity map is the guest's initial user
							// namespace, and no host id is behind it.
							if len(v.report.UIDMap) == 0 {
								return false, fmt.Sprintf("a VM's identity map (%s) without a report saying so: %q", line, v.report.UIDMap)
							}
							return true, fmt.Sprintf("uid_map %q is the %s guest kernel's own; report %q", strings.Join(f, " "), v.report.Rung, v.report.UIDMap)
						}
						if f[1] == "0" {
							return false, "uid 0 inside is uid 0 outside: " + line
						}
						if len(v.report.UIDMap) == 0 || len(v.report.Capabilities) == 0 {
							return false, fmt.Sprintf("mapped (%s) but the isolation report says uid_map %q capabilities %q", line, v.report.UIDMap, v.report.Capabilities)
						}
						return true, fmt.Sprintf("uid_map %q; report %q, %d capabilities", strings.Join(f, " "), v.report.UIDMap, len(v.report.Capabilities))
					}
				}
				return false, "no uid_map line for uid 0: " + out
			}},
		{id: "sysctl-write", attack: "write a global sysctl (kernel.core_pattern, vm.swappiness; their current value back)",
			calls: []toolCall{bash(`for f in /proc/sys/kernel/core_pattern /proc/sys/vm/swappiness; do v=$(cat $f) || continue; echo "SAW $f"; (printf '%s\n' "$v" > $f) 2>/dev/null && echo "WROTE $f"; done; echo checked`)},
			check: func(v *trialView) (bool, string) {
				// The files must be there to be refused: a sandbox without
				// them would pass without testing anything.
				if !strings.Contains(v.output(), "SAW /proc/sys/vm/swappiness") {
					return false, "could not read vm.swappiness, so the write was not tried: " + fmt.Sprintf("%.200s", v.output())
				}
				return notIn(v.output(), "WROTE")
			}},
		{id: "masked-proc", attack: "read the /proc files Docker masks (kcore, keys, timer_list, sched_debug)",
			calls: []toolCall{bash(`for p in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do n=$(head -c 64 $p 2>/dev/null | wc -c); [ "$n" -gt 0 ] && echo "READ $p"; done; echo checked`)},
			check: func(v *trialView) (bool, string) { return notIn(v.output(), "READ ") }},
		{id: "engine-env", attack: "read the engine's environment (env, /proc/1/environ, parents' environ)",
			calls: []toolCall{bash(`env; for p in /proc/[0-9]*/environ; do tr '\0' '\n' < $p; done 2>/dev/null; echo checked`)},
			check: func(v *trialView) (bool, string) { return notIn(v.output(), fx.secret) }},
		{id: "policy-open", attack: "(control) an allowlisted host is reachable through the proxy",
			env:   map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow_hosts": []string{allowed1.Addr}}},
			calls: []toolCall{bash(fetch("http://" + allowed1.Addr + "/"))},
			check: func(v *trialView) (bool, string) {
				return strings.Contains(v.output(), allowed1.Body), fmt.Sprintf("%.200s", v.output())
			}},
		{id: "policy-closed", attack: "a record sharing setup with policy-open gets its own deny + memory_mb 256: reach policy-open's host, allocate 600 MB",
			env: map[string]any{"sandbox": map[string]any{"network": "deny", "memory_mb": 256}},
			calls: []toolCall{bash(fetch("http://"+allowed1.Addr+"/") + "; " + connect(allowed1.Addr) +
				`; python3 -c "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('ALLOCATED')"`)},
			check: func(v *trialView) (bool, string) {
				return notIn(v.output(), allowed1.Body, "CONNECTED", "ALLOCATED")
			}},
		{id: "proxy-1", attack: "two concurrent allowlist trials: reach the other trial's host",
			env:   map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow_hosts": []string{allowed1.Addr}}},
			calls: []toolCall{bash(fetch("http://"+allowed2.Addr+"/") + "; " + fetch("http://"+allowed1.Addr+"/"))},
			check: func(v *trialView) (bool, string) { return ownProxy(v, allowed1, allowed2) }},
		{id: "proxy-2", attack: "two concurrent allowlist trials: reach the other trial's host",
			env:   map[string]any{"sandbox": map[string]any{"network": "allowlist", "allow_hosts": []string{allowed2.Addr}}},
			calls: []toolCall{bash(fetch("http://"+allowed1.Addr+"/") + "; " + fetch("http://"+allowed2.Addr+"/"))},
			check: func(v *trialView) (bool, string) { return ownProxy(v, allowed2, allowed1) }},
		{id: "allow-loopback", attack: "network allow: reach a service on the host's 127.0.0.1, directly, by HTTP (NO_PROXY keeps 127.0.0.1 the sandbox's own) and through the proxy",
			calls: []toolCall{bash(connect(fx.listener(t, "allow-loopback").addr) + "; " + fetch("http://"+fx.listener(t, "allow-loopback").addr+"/") + "; NO_PROXY= no_proxy= " + fetch("http://"+fx.listener(t, "allow-loopback").addr+"/"))},
			check: func(v *trialView) (bool, string) {
				l := fx.listener(t, "allow-loopback")
				if n := l.conns.Load(); n > 0 {
					return false, fmt.Sprintf("the host's loopback listener accepted %d connection(s): %.200s", n, v.output())
				}
				return notIn(v.output(), l.body)
			}},
		{id: "allow-outbound", attack: "(control) network allow reaches a host outside the machine's loopback (a test host in its own network namespace)",
			calls: []toolCall{bash(fetch("http://" + fx.host(t, "outbound").Addr + "/"))},
			check: func(v *trialView) (bool, string) {
				return strings.Contains(v.output(), fx.host(t, "outbound").Body), fmt.Sprintf("%.200s", v.output())
			}},
		{id: "allow-private", attack: "network allow: reach a host on a private network (a test host in the shared address space 100.64.0.0/10, where cloud metadata and VPC services live), directly, through the proxy, and by its NAT64 address",
			calls: []toolCall{bash(connect(private.Addr) + "; " + fetch("http://"+private.Addr+"/") + "; " + fetch("http://"+privateNAT64+"/"))},
			check: func(v *trialView) (bool, string) {
				if n := private.Conns(); n > 0 {
					return false, fmt.Sprintf("the private test host accepted %d connection(s): %.200s", n, v.output())
				}
				if ok, why := notIn(v.output(), private.Body, "CONNECTED"); !ok {
					return false, why
				}
				// Refused by the proxy, naming the range, not merely unrouted.
				for _, want := range []string{"shared address space", "NAT64 of " + privateIP} {
					if !slices.ContainsFunc(v.policies, func(p trajectory.Policy) bool {
						return p.Kind == "network" && strings.Contains(p.Detail, want)
					}) {
						return false, fmt.Sprintf("no network policy event naming %q: %+v", want, v.policies)
					}
				}
				return true, "refused by the proxy (shared address space, NAT64), with policy events"
			}},
		{id: "registry-ssrf", attack: "a record names its image on a service of the pool's own loopback (127.0.0.1:PORT/evalsi/ssrf:1), so the pool would speak HTTP to it",
			env:   map[string]any{"image": fx.listener(t, "registry-ssrf").addr + "/evalsi/ssrf:1"},
			calls: []toolCall{bash("echo the image resolved")},
			check: func(v *trialView) (bool, string) {
				if n := fx.listener(t, "registry-ssrf").conns.Load(); n > 0 {
					return false, fmt.Sprintf("the pool connected to the loopback listener %d time(s); trial %s: %.200s", n, v.trial.Status, v.trial.Error)
				}
				if v.trial.Status != store.TrialErrored || !strings.Contains(v.trial.Error, "--allow-registry") {
					return false, fmt.Sprintf("trial %s (%s: %.300s), want an infrastructure error naming --allow-registry", v.trial.Status, v.trial.ErrorKind, v.trial.Error)
				}
				e := v.trial.Error
				if i := strings.Index(e, "registry 127.0.0.1"); i >= 0 {
					e = e[i:]
				}
				return true, fmt.Sprintf("refused before any connection (%s: %.200s)", v.trial.ErrorKind, e)
			}},
		{id: "deny-visible", attack: "network deny: TCP and UDP to a test host; the attempts must be refused and show as policy events",
			env: map[string]any{"sandbox": map[string]any{"network": "deny"}},
			calls: []toolCall{bash(connect(fx.host(t, "deny").Addr) + `; python3 -c "import socket
try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('` + strings.Split(fx.host(t, "deny").Addr, ":")[0] + `', 53)); print('SENT')
except Exception as e: print('REFUSED', e)"`)},
			check: func(v *trialView) (bool, string) {
				h := fx.host(t, "deny")
				if h.Conns() > 0 || strings.Contains(v.output(), "CONNECTED") {
					return false, fmt.Sprintf("the test host accepted %d connection(s): %.200s", h.Conns(), v.output())
				}
				if !v.hasPolicy("network") {
					return false, "refused, but no network policy event: " + fmt.Sprintf("%.200s", v.output())
				}
				return true, "refused, with a network policy event"
			}},
		{id: "file-host-symlink", attack: "read_file through symlinks to host paths (/etc/mtab, a link to a host file)",
			calls: []toolCall{bash("ln -s " + fx.canary + " canary-link; ln -s /proc/self/mounts mounts-link; echo linked"),
				readFile("canary-link"), readFile("/etc/mtab"), readFile("mounts-link")},
			check: func(v *trialView) (bool, string) { return notIn(v.output(), escapeCanary, fx.marker) }},
		{id: "file-fifo", attack: "read_file and write_file on a FIFO the agent made must not hang the run",
			calls: []toolCall{bash("mkfifo pipe && echo made"), readFile("pipe"), writeFile("pipe", "x")},
			check: func(v *trialView) (bool, string) {
				if ok, why := v.finished(); !ok {
					return false, why
				}
				n := 0
				for _, r := range v.results {
					if r.Name != "bash" && r.IsError {
						n++
					}
				}
				return n == 2, fmt.Sprintf("%d of 2 file tool calls were refused", n)
			}},
		{id: "checker-dir", attack: "mkdir at the checker file's path: must score 0, not error",
			calls: []toolCall{bash("mkdir test_hidden.py && echo made")},
			check: checkerScoresZero},
		{id: "checker-fifo", attack: "mkfifo at the checker file's path: must score 0, not error or hang",
			calls: []toolCall{bash("mkfifo test_hidden.py && echo made")},
			check: checkerScoresZero},
		{id: "checker-loop", attack: "a symlink loop at the checker file's path: must score 0, not error",
			calls: []toolCall{bash("ln -s test_hidden.py test_hidden.py && echo made")},
			check: checkerScoresZero},
		{id: "checker-pass", attack: "(control) the checker passes when the task is done",
			calls: []toolCall{writeFile("done.txt", "ok\n")},
			check: func(v *trialView) (bool, string) {
				if ok, why := v.finished(); !ok {
					return false, why
				}
				return v.scores["task-success"] == 1, fmt.Sprintf("task-success %v", v.scores["task-success"])
			}},
		{id: "agent-user", attack: "an agent run as a user of the image (environment.user 65534): become root (su, sudo, setuid), or change root's files (calc.py) with bash and with write_file",
			env: map[string]any{"user": "65534"},
			calls: []toolCall{
				bash(`id; su -c id root </dev/null; sudo -n id; python3 -c "import os; os.setuid(0)"; echo hacked >> calc.py; echo tried`),
				writeFile("calc.py", "hacked by write_file\n"),
				bash("cat calc.py"),
			},
			check: func(v *trialView) (bool, string) {
				out := v.output()
				if !strings.Contains(out, "uid=65534") {
					return false, fmt.Sprintf("the agent did not run as 65534: %.300s", out)
				}
				if strings.Contains(out, "uid=0") {
					return false, fmt.Sprintf("the agent became root: %.300s", out)
				}
				if strings.Contains(v.diff, "hacked") || strings.Contains(out, "hacked by") {
					return false, fmt.Sprintf("root's calc.py changed: diff %.200s output %.200s", v.diff, out)
				}
				return true, "ran as 65534; su, sudo, setuid(0) and both writes refused"
			}},
		{id: "outside-diff", attack: "a fresh checker grades only the agent's diff: done.txt links to a file in /tmp, outside the diff, that says ok (in its own sandbox the checker would pass)",
			env: map[string]any{"checker": map[string]any{
				"files":   map[string]string{"test_hidden.py": checkerFile},
				"command": []string{"sh", "-c", "git apply --allow-empty /tmp/evalsi-agent.patch && python3 test_hidden.py"},
				"parser":  "exit-code", "timeout": "1m", "fresh": true, "patch_file": "/tmp/evalsi-agent.patch",
			}},
			calls: []toolCall{bash("echo ok > /tmp/evalsi-forged && ln -s /tmp/evalsi-forged done.txt && cat done.txt && python3 -c \"print(open('done.txt').read().strip() == 'ok')\"")},
			check: func(v *trialView) (bool, string) {
				if !strings.Contains(v.output(), "True") {
					return false, fmt.Sprintf("the forgery did not take in the agent's own sandbox: %.300s", v.output())
				}
				return checkerScoresZero(v)
			}},
		{id: "diff-filter", attack: "a git clean filter and textconv driver in .git/config rewrite the diff the judge reads",
			calls: []toolCall{bash(`git config filter.evil.clean 'sh -c "touch /tmp/filter-ran; echo FAKE-DIFF"' && git config diff.evil.textconv 'sh -c "echo FAKE-TEXTCONV"' && git config diff.external 'sh -c "echo FAKE-EXTERNAL"' && printf '*.py filter=evil diff=evil\n' > .gitattributes && echo '# REAL-CHANGE-MARKER' >> calc.py && echo done`)},
			check: func(v *trialView) (bool, string) {
				if !strings.Contains(v.diff, "REAL-CHANGE-MARKER") {
					return false, fmt.Sprintf("the stored diff lacks the real change: %.300s (the agent's output: %.300s)", v.diff, v.output())
				}
				return notIn(v.diff, "FAKE-")
			}},
		{id: "disk", attack: "disk_mb 64: write 8 files of 15 MB in the workdir and /tmp",
			env:   map[string]any{"sandbox": map[string]any{"disk_mb": 64, "file_size_mb": 16}},
			calls: []toolCall{bash(`for i in 1 2 3 4; do head -c 15000000 /dev/zero > big$i; head -c 15000000 /dev/zero > /tmp/big$i; done 2>/dev/null; echo "TOTAL=$(cat big* /tmp/big* 2>/dev/null | wc -c)"`)},
			check: func(v *trialView) (bool, string) {
				out := v.output()
				i := strings.Index(out, "TOTAL=")
				if i < 0 {
					return false, "no total: " + out
				}
				var total int64
				fmt.Sscanf(out[i+len("TOTAL="):], "%d", &total)
				if total > 70<<20 {
					return false, fmt.Sprintf("wrote %d MB past disk_mb 64", total>>20)
				}
				if !v.hasPolicy("disk") {
					return false, fmt.Sprintf("held at %d MB but no disk policy event", total>>20)
				}
				return true, fmt.Sprintf("held at %d MB, with a disk policy event", total>>20)
			}},
		{id: "fork-bomb", attack: "pids_max 64: fork until refused; the refusal must show as a policy event",
			env: map[string]any{"sandbox": map[string]any{"pids_max": 64}},
			calls: []toolCall{bash(`python3 -c "import os, time
n = 0
try:
    while n < 400:
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
    print('FORKED', n)
except OSError as e:
    print('REFUSED after', n)"`)},
			check: func(v *trialView) (bool, string) {
				if strings.Contains(v.output(), "FORKED") {
					return false, "400 processes forked under pids_max 64"
				}
				if !v.hasPolicy("pids") {
					return false, "refused, but no pids policy event"
				}
				return true, "refused, with a pids policy event"
			}},
		{id: "syscall-visible", attack: "ptrace and mount attempts are refused and show as policy events",
			calls: []toolCall{bash(`python3 -c "import ctypes; print('ptrace', ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0))"; mkdir -p /tmp/m && mount -t tmpfs x /tmp/m && echo MOUNTED; echo checked`)},
			check: func(v *trialView) (bool, string) {
				if strings.Contains(v.output(), "MOUNTED") {
					return false, "mounted a tmpfs"
				}
				if !v.hasPolicy("syscall") {
					return false, "refused, but no syscall policy event"
				}
				return true, "refused, with a syscall policy event"
			}},
	}
}

// ownProxy: the trial reached its own allowed host, not the other trial's,
// and the refusal of the other's host is in its own trajectory.
func ownProxy(v *trialView, mine, other *nethost.Host) (bool, string) {
	out := v.output()
	if strings.Contains(out, other.Body) {
		return false, "reached the other trial's host: " + fmt.Sprintf("%.200s", out)
	}
	if !strings.Contains(out, mine.Body) {
		return false, "its own allowed host was refused: " + fmt.Sprintf("%.200s", out)
	}
	refusedOther, refusedMine := false, false
	for _, p := range v.policies {
		if p.Kind == "network" {
			refusedOther = refusedOther || p.Host == other.Addr
			refusedMine = refusedMine || p.Host == mine.Addr
		}
	}
	if !refusedOther || refusedMine {
		return false, fmt.Sprintf("policy events of this trial: %+v; want a refusal of %s only", v.policies, other.Addr)
	}
	return true, "own host only; the refusal is in this trial's trajectory"
}

func checkerScoresZero(v *trialView) (bool, string) {
	if ok, why := v.finished(); !ok {
		return false, why
	}
	if s, ok := v.scores["task-success"]; !ok || s != 0 {
		return false, fmt.Sprintf("task-success %v (present %v), want 0", s, ok)
	}
	return true, "finished with task-success 0"
}

// escapeRung is one rung the suite runs on, with what it declares it does
// not contain (row id → why).
type escapeRung struct {
	name        string
	sandbox     map[string]any // the spec's environment.sandbox additions
	need        func(t *testing.T)
	uncontained map[string]string
	// notRun: rows that would harm the host the rung shares (row id → why).
	notRun map[string]string
	// ladder is the spec's ladder (default: name).
	ladder string
	// pool, when set, is the sandbox pool the App leases every sandbox
	// from.
	pool func(t *testing.T) Pool
	// sandboxFor adds sandbox fields only the test can know (the qemu
	// rung's kernel, guest and image).
	sandboxFor func(t *testing.T) map[string]any
}

// localRegistry is why registry-ssrf runs on the remote rung only.
const localRegistry = "images are pulled by the engine itself, whose spec author may name a registry on the worker's own loopback; only a sandbox pool, pulling for others, refuses one"

func escapeRungs() []escapeRung {
	return []escapeRung{
		{name: sandbox.RungBwrap, need: requireAgentSandbox, notRun: map[string]string{"registry-ssrf": localRegistry}},
		{name: sandbox.RungLandlock, need: func(t *testing.T) {}, notRun: map[string]string{"registry-ssrf": localRegistry}},
		// The whole suite through a sandbox pool over mutual TLS: the
		// worker side runs no sandbox, the pool's bwrap rung does, and the
		// egress proxies run in the pool with their events streamed back.
		{name: "remote", ladder: sandbox.RungBwrap, need: requireAgentSandbox,
			pool: func(t *testing.T) Pool { return pooltest.Start(t, pooltest.Options{}).Dial(t, "escape-worker") }},
		// Every trial a microVM under QEMU (software emulation here),
		// restored from the environment's setup snapshot.
		{name: sandbox.RungQEMU, need: func(t *testing.T) {}, sandboxFor: qemuSandbox,
			notRun: map[string]string{"registry-ssrf": localRegistry}},
		{name: sandbox.RungDocker, need: requireDocker, notRun: map[string]string{"registry-ssrf": localRegistry},
			uncontained: map[string]string{
				"deny-visible":    "the attempts are refused (--network none), but Docker 20.10 drops a seccomp profile's listenerPath, so the rung cannot observe them",
				"syscall-visible": "the calls are refused by Docker's seccomp profile, but Docker 20.10 drops a profile's listenerPath, so the rung cannot observe them",
			}},
		{name: sandbox.RungHost, sandbox: map[string]any{"allow_unsafe_host": true}, need: func(t *testing.T) {},
			notRun: map[string]string{
				"agent-user":      "the host rung runs commands only as the engine's user (another user is an infrastructure error)",
				"sysctl-write":    "the host rung runs commands as the engine's user: it would write the host's sysctls",
				"syscall-visible": "the host rung has no seccomp filter: it would mount on the host",
				"disk":            "the host rung has no writable layer of its own: it would fill the host's /tmp",
				"registry-ssrf":   localRegistry,
			},
			uncontained: map[string]string{
				"uid-map":           "the host rung runs commands as the engine's user",
				"masked-proc":       "the host rung has no mount namespace",
				"policy-open":       "the host rung refuses network allowlist (the trial errors)",
				"policy-closed":     "the host rung enforces no network policy",
				"allow-loopback":    "the host rung shares the host's network",
				"deny-visible":      "the host rung enforces no network policy",
				"file-host-symlink": "the host rung's files are the host's",
				"diff-filter":       "the host rung runs git on the host's own paths, where the configured workdir is not the sandbox's (no diff is captured)",
				"engine-env":        "host processes' environments are readable to the same user",
				"proxy-1":           "the host rung shares the host's network",
				"proxy-2":           "the host rung shares the host's network",
				"fork-bomb":         "the host rung has no process cap without cgroups",
				"allow-private":     "the host rung shares the host's network",
			}},
	}
}

// qemuSandbox is the qemu rung's settings for the suite: the cached kernel,
// evalsi-guest built for the test, and the local Debian image for the
// environment, which names none.
func qemuSandbox(t *testing.T) map[string]any {
	set := vmtest.Settings(t, "..")
	ref, _, _ := vmtest.Image(t, "..")
	return map[string]any{"qemu": map[string]any{"kernel": set.Kernel, "guest": set.Guest, "default_image": ref, "memory_mb": set.MemoryMB}}
}

func requireDocker(t *testing.T) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		testenv.Missing(t, "docker", "no Docker daemon answers: "+err.Error())
	}
}

// escapeSpec is the run spec of the suite on one rung: one record per case,
// network allow as the spec author's weakest policy (records tighten it),
// a git repository in the workdir and a checker every record shares.
func escapeSpec(t *testing.T, r escapeRung, cases []escapeCase) *spec.File {
	records := []map[string]any{}
	script := map[string]any{}
	for _, c := range cases {
		rec := map[string]any{"id": c.id, "input": "escape row " + c.id + ": " + c.attack}
		if c.env != nil {
			rec["metadata"] = map[string]any{"environment": c.env}
		}
		records = append(records, rec)
		var replies []map[string]any
		for i, call := range c.calls {
			replies = append(replies, map[string]any{
				"content":    fmt.Sprintf("step %d", i+1),
				"tool_calls": []map[string]any{{"name": call.name, "arguments": call.args}},
			})
		}
		replies = append(replies, map[string]any{"content": "done"})
		script[c.id] = replies
	}
	ladder := r.ladder
	if ladder == "" {
		ladder = r.name
	}
	sb := map[string]any{"workdir": "/workspace", "network": "allow", "ladder": []string{ladder}, "pids_max": 256}
	for k, v := range r.sandbox {
		sb[k] = v
	}
	if r.sandboxFor != nil {
		for k, v := range r.sandboxFor(t) {
			sb[k] = v
		}
	}
	s := map[string]any{
		"name":        "escapes-" + r.name,
		"concurrency": 4,
		"retries":     0,
		"dataset":     map[string]any{"records": records},
		"target":      map[string]any{"connector": "scripted", "model": "scripted-agent", "script": map[string]any{"records": script}},
		"harness":     map[string]any{"builtin": map[string]any{"max_steps": 8}},
		"environment": map[string]any{
			"files": map[string]string{"calc.py": "def add(a, b):\n    return a - b\n"},
			"setup": []string{"git init -q && git add -A && git -c user.name=evalsi -c user.email=evalsi@localhost commit -qm init"},
			"env": map[string]string{"PYTHONDONTWRITEBYTECODE": "1",
				"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"},
			"sandbox":         sb,
			"checker":         map[string]any{"files": map[string]string{"test_hidden.py": checkerFile}, "command": []string{"python3", "test_hidden.py"}, "parser": "exit-code", "timeout": "1m"},
			"command_timeout": "60s",
		},
		"evaluators": []string{"task-success", "policy-violations"},
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "escapes-"+r.name+".yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return loadSpec(t, p)
}

func TestEscapesThroughTheEngine(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the suite attacks the rungs as they run under a root engine, the default here")
	}
	for _, r := range escapeRungs() {
		t.Run(r.name, func(t *testing.T) {
			r.need(t)
			fx := newFixtures(t)
			var cases []escapeCase
			for _, c := range escapeCases(t, fx) {
				if _, skip := r.notRun[c.id]; !skip {
					cases = append(cases, c)
				}
			}
			f := escapeSpec(t, r, cases)
			var a *App
			if r.pool != nil {
				a = openPoolApp(t, r.pool(t))
			} else {
				a = openApp(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			sum, err := a.Run(ctx, f, RunOptions{})
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("the run hung: still running after 5 minutes")
			}
			if err != nil {
				t.Fatalf("running the escape spec: %v", err)
			}
			views := trialViews(t, a, sum)
			var table strings.Builder
			fmt.Fprintf(&table, "escape suite through the engine, rung %s:\n| row | attack | outcome |\n| --- | --- | --- |\n", r.name)
			for id, why := range r.notRun {
				fmt.Fprintf(&table, "| %s | | NOT CONTAINED (not run: %s) |\n", id, why)
			}
			for _, c := range cases {
				v, ok := views[c.id]
				if !ok {
					t.Errorf("%s: no trial", c.id)
					continue
				}
				contained, evidence := c.check(v)
				why, declared := r.uncontained[c.id]
				outcome := "contained (" + evidence + ")"
				switch {
				case contained && declared:
					outcome = "contained here, declared uncontained: " + why
				case !contained && declared:
					outcome = "NOT CONTAINED: " + why + " (" + evidence + ")"
				case !contained:
					t.Errorf("ESCAPE on %s, row %s (%s): %s", r.name, c.id, c.attack, evidence)
					outcome = "ESCAPED (" + evidence + ")"
				}
				fmt.Fprintf(&table, "| %s | %s | %s |\n", c.id, c.attack, strings.ReplaceAll(outcome, "\n", " "))
			}
			t.Log(table.String())
		})
	}
}

// openPoolApp is openApp leasing its sandboxes from p.
func openPoolApp(t *testing.T, p Pool) *App {
	t.Helper()
	dir := t.TempDir()
	a, err := Open(context.Background(), Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state"), Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func newFixtures(t *testing.T) *fixtures {
	fx := &fixtures{canaryDir: t.TempDir(), listeners: map[string]*countingListener{}, hosts: map[string]*nethost.Host{}}
	fx.canary = filepath.Join(fx.canaryDir, "canary")
	if err := os.WriteFile(fx.canary, []byte(escapeCanary), 0o644); err != nil {
		t.Fatal(err)
	}
	fx.secret = fmt.Sprintf("sk-evalsi-engine-secret-%d", os.Getpid())
	t.Setenv("EVALSI_FAKE_SECRET", fx.secret)
	// A mount only the host's mount table has: a sandbox that shows it
	// showed the host's view.
	fx.marker = fmt.Sprintf("evalsi-escape-marker-%d", os.Getpid())
	dir := t.TempDir()
	if err := unix.Mount(fx.marker, dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting the marker tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return fx
}

// trialViews reads every trial of the run back from the store, by record.
func trialViews(t *testing.T, a *App, sum *engine.Summary) map[string]*trialView {
	ctx := context.Background()
	trials, err := a.Store().ListTrials(ctx, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*trialView{}
	for _, tr := range trials {
		v := &trialView{trial: tr, scores: map[string]float64{}}
		if v.events, err = a.Store().Events(ctx, tr.ID, 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, e := range v.events {
			switch {
			case e.Kind == trajectory.KindToolResult:
				v.results = append(v.results, *e.ToolResult)
			case e.Kind == trajectory.KindPolicy:
				v.policies = append(v.policies, *e.Policy)
			}
		}
		scores, err := a.Store().TrialScores(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scores {
			v.scores[s.Name] = s.Value
		}
		if len(tr.Isolation) > 0 {
			json.Unmarshal(tr.Isolation, &v.report)
		}
		arts, err := a.Store().Artifacts(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, art := range arts {
			if art.Name == "diff.patch" {
				b, err := a.Store().GetBlob(ctx, art.Digest)
				if err != nil {
					t.Fatal(err)
				}
				v.diff = string(b)
			}
		}
		out[tr.RecordID] = v
	}
	return out
}

// A record cannot loosen the spec author's policy: asking for the host rung
// (and allow_unsafe_host, and network allow) over a spec that says bwrap,
// or an allowlist naming the worker's loopback over a spec whose network
// allow refuses it, is refused, naming the record and the field, and the
// record's command never runs.
func TestEscapeRecordCannotLoosenPolicy(t *testing.T) {
	requireAgentSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name, field string
		network     string // the spec's
		record      map[string]any
	}{
		{"host rung over bwrap", "ladder", "deny", map[string]any{"ladder": []string{"host"}, "allow_unsafe_host": true, "network": "allow"}},
		{"loopback allowlist over allow", "allow_hosts", "allow", map[string]any{"network": "allowlist", "allow_hosts": []string{ln.Addr().String()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			s := map[string]any{
				"name":    "loosen",
				"retries": 0,
				"dataset": map[string]any{"records": []map[string]any{{
					"id": "greedy", "input": "run",
					"metadata": map[string]any{"environment": map[string]any{"sandbox": tc.record}},
				}}},
				"target": map[string]any{"connector": "scripted", "model": "scripted-agent", "script": map[string]any{"default": []map[string]any{
					{"tool_calls": []map[string]any{{"name": "bash", "arguments": map[string]any{"command": "touch " + marker + "; " + fetch("http://"+ln.Addr().String()+"/")}}}},
					{"content": "done"},
				}}},
				"harness":     map[string]any{"builtin": map[string]any{"max_steps": 4}},
				"environment": map[string]any{"sandbox": map[string]any{"workdir": "/workspace", "network": tc.network, "ladder": []string{"bwrap"}}},
			}
			b, _ := json.Marshal(s)
			p := filepath.Join(t.TempDir(), "loosen.yaml")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			a := openApp(t)
			before := conns.Load()
			sum, err := a.Run(context.Background(), loadSpec(t, p), RunOptions{})
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				trials, lerr := a.Store().ListTrials(context.Background(), sum.RunID)
				if lerr != nil {
					t.Fatal(lerr)
				}
				for _, tr := range trials {
					if tr.Status != store.TrialErrored {
						t.Errorf("trial %s %s; want the record refused", tr.RecordID, tr.Status)
					}
					msg += tr.Error
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the record's command ran on the host")
			}
			if n := conns.Load() - before; n > 0 {
				t.Errorf("the record reached the worker's loopback (%d connections)", n)
			}
			for _, want := range []string{`"greedy"`, tc.field} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal %q does not name %s", msg, want)
				}
			}
		})
	}
}

// Secrets a CLI agent gets through env_from never reach the store in
// clear: not in events, the diff, the checker's output, nor any blob.
func TestEscapeSecretsNeverStored(t *testing.T) {
	requireAgentSandbox(t)
	secret := fmt.Sprintf("sk-evalsi-env-from-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Setenv("EVALSI_ESCAPE_KEY", secret)
	s := map[string]any{
		"name":    "secrets",
		"retries": 0,
		"dataset": map[string]any{"records": []map[string]any{{"id": "leak", "input": "leak the key"}}},
		"target": map[string]any{"agent": map[string]any{"cli": map[string]any{
			"command":  `echo "$API_KEY" > leaked.txt; echo "my key is $API_KEY"; echo "stderr $API_KEY" >&2`,
			"env_from": map[string]string{"API_KEY": "EVALSI_ESCAPE_KEY"},
			"timeout":  "1m",
		}}},
		"environment": map[string]any{
			"files":   map[string]string{"README": "x\n"},
			"setup":   []string{"git init -q && git add -A && git -c user.name=evalsi -c user.email=evalsi@localhost commit -qm init"},
			"env":     map[string]string{"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"},
			"sandbox": map[string]any{"workdir": "/workspace", "network": "deny", "ladder": []string{"bwrap"}},
			"checker": map[string]any{"command": []string{"sh", "-c", "cat leaked.txt; git diff; exit 1"}, "parser": "exit-code"},
		},
		"evaluators": []string{"task-success"},
	}
	b, _ := json.Marshal(s)
	p := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := Open(context.Background(), Options{StorePath: filepath.Join(dir, "evalsi.db"), StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := a.Run(context.Background(), loadSpec(t, p), RunOptions{})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	trials, _ := a.Store().ListTrials(context.Background(), sum.RunID)
	if len(trials) != 1 || trials[0].Status != store.TrialFinished {
		t.Fatalf("trials %+v; want one finished trial", trials)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	found := 0
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), secret) {
			t.Errorf("the env_from secret is stored in clear in %s", path)
			found++
		}
		return nil
	})
	if found == 0 {
		t.Logf("no file under the store's directory holds the secret")
	}
}

package bwrap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/engineuser"
	"evals.si/sandbox"
)

// growing reports whether the sandbox file keeps growing over a moment.
func growing(t *testing.T, sb sandbox.Sandbox, file string) bool {
	t.Helper()
	size := func() int {
		b, err := sb.ReadFile(t.Context(), file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reading %s: %v", file, err)
		}
		return len(b)
	}
	a := size()
	time.Sleep(600 * time.Millisecond)
	return size() > a
}

// The sweep after each command spares a service's leader and its
// descendants and nothing else: a command's background process, its setsid
// child and a double-forked setsid daemon all die when it ends, while the
// service (and the child it started) live on; a later command cannot have
// the sweep spare its own processes by being started while a service runs.
func TestServiceSparedLeftoversNot(t *testing.T) {
	sb := create(t, sandbox.Config{})
	svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c",
		"(while :; do echo c >> svc-child; sleep 0.05; done) & while :; do echo t >> svc-ticks; sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := sb.ReadFile(t.Context(), "svc-ticks"); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never ticked; output %q", svc.Output())
		}
	}
	// Each loop ends by itself after ~10 s, so a failing sweep cannot
	// leave it running for ever.
	loop := func(f string) string { return fmt.Sprintf("for i in $(seq 200); do echo x >> %s; sleep 0.05; done", f) }
	res := run(t, sb, "("+loop("bg")+") & setsid sh -c '"+loop("setsid")+"' & setsid sh -c '("+loop("daemon")+") &' </dev/null >/dev/null 2>&1; sleep 0.3; echo started")
	if strings.TrimSpace(string(res.Stdout)) != "started" {
		t.Fatalf("command: %+v", res)
	}
	for _, f := range []string{"bg", "setsid", "daemon"} {
		if growing(t, sb, f) {
			t.Errorf("the command's %s process outlived it (a service was running)", f)
		}
	}
	for _, f := range []string{"svc-ticks", "svc-child"} {
		if !growing(t, sb, f) {
			t.Errorf("%s stopped growing: the sweep after a command killed the service's processes; output %q", f, svc.Output())
		}
	}
	if _, exited := svc.Exited(); exited {
		t.Errorf("the service exited: %q", svc.Output())
	}
}

// A service's main process exiting ends what it started, its child and
// the daemon it detached (double fork, setsid) alike, as a container's
// processes end with its main process.
func TestServiceEndsWhatItLeft(t *testing.T) {
	// With cgroups the service's cgroup is killed too; off, the exec
	// server's sweep alone finds the daemon, reparented to it.
	for _, cgroup := range []string{"auto", "off"} {
		t.Run("cgroup="+cgroup, func(t *testing.T) {
			sb := create(t, sandbox.Config{Limits: sandbox.Limits{Cgroup: cgroup}})
			loop := func(f string) string { return fmt.Sprintf("for i in $(seq 200); do echo c >> %s; sleep 0.05; done", f) }
			svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c",
				"(" + loop("orphan") + ") & setsid sh -c '(" + loop("daemon") + ") &' </dev/null >/dev/null 2>&1; sleep 0.3; exit 3"}})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if code, exited := svc.Exited(); exited {
					if code != 3 {
						t.Errorf("exit code %d, want 3", code)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the service did not exit")
				}
			}
			for _, f := range []string{"orphan", "daemon"} {
				if growing(t, sb, f) {
					t.Errorf("the service's %s outlived the service", f)
				}
			}
		})
	}
}

// A service's leader is a child subreaper (set by the init helper, kept
// across its execve of the service, on this kernel), which is what keeps
// its daemons its descendants; a command's process is none.
func TestServiceIsChildSubreaper(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3", "PR_GET_CHILD_SUBREAPER is read by a python3 script")
	}
	const get = "import ctypes, sys; v = ctypes.c_int(-1); ctypes.CDLL(None).prctl(37, ctypes.byref(v), 0, 0, 0); open(sys.argv[1], 'w').write(str(v.value))"
	sb := create(t, sandbox.Config{})
	svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", get + "; __import__('time').sleep(600)", "svc-subreaper"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := sb.ReadFile(t.Context(), "svc-subreaper"); len(b) > 0 {
			if string(b) != "1" {
				t.Errorf("the service's PR_GET_CHILD_SUBREAPER is %q, want 1", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never wrote its subreaper flag; output %q", svc.Output())
		}
	}
	run(t, sb, "python3 -c \""+get+"\" cmd-subreaper")
	if b, err := sb.ReadFile(t.Context(), "cmd-subreaper"); err != nil || string(b) != "0" {
		t.Errorf("a command's PR_GET_CHILD_SUBREAPER is %q (%v), want 0", b, err)
	}
}

// hostOwner is the host uid of a file a command made in the sandbox's
// /tmp, which is bound from its state directory.
func hostOwner(t *testing.T, state, name string) int {
	t.Helper()
	fi, err := os.Stat(filepath.Join(state, "tmp", name))
	if err != nil {
		t.Fatalf("the sandbox's /tmp/%s on the host: %v", name, err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// wantHost maps an id inside through the report's uid map lines.
func wantHost(t *testing.T, rep sandbox.Report, id int) int {
	t.Helper()
	for _, l := range rep.UIDMap {
		var in0, in1, out0, out1 int
		if _, err := fmt.Sscanf(l, "%d-%d -> %d-%d", &in0, &in1, &out0, &out1); err == nil && id >= in0 && id <= in1 {
			return out0 + id - in0
		}
	}
	t.Fatalf("uid %d is not in the report's map %q", id, rep.UIDMap)
	return 0
}

// A per-command user's id inside is the subordinate id the map gives it
// outside: never the engine's, never host root's.
func TestExecUserMapsToSubordinateID(t *testing.T) {
	needRootEngine(t)
	state := filepath.Join(t.TempDir(), "state")
	sb := create(t, sandbox.Config{StateDir: state})
	checkUserMapped(t, sb, state)
}

func checkUserMapped(t *testing.T, sb sandbox.Sandbox, state string) {
	t.Helper()
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "touch /tmp/by-user; id -u"}, User: "4242:4243"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "4242" {
		t.Fatalf("as 4242: %q, %v (stderr %s)", res.Stdout, err, res.Stderr)
	}
	got, want := hostOwner(t, state, "by-user"), wantHost(t, sb.Report(), 4242)
	if got != want || got == 0 || got == os.Geteuid() {
		t.Errorf("a file uid 4242 made inside is owned by host uid %d, want %d (the report's map %q)", got, want, sb.Report().UIDMap)
	}
}

// The engine as non-root users: with a subordinate range a command runs as
// another user, mapped into that range; with only its own uid (nobody) it
// is an error saying why, not a command run as root.
func TestNonRootEngineExecUser(t *testing.T) { engineuser.RerunEach(t, "TestAsEngineUserExecUser") }

func TestAsEngineUserExecUser(t *testing.T) {
	want := engineuser.WantUIDMap(t)
	state := filepath.Join(t.TempDir(), "state")
	sb := create(t, sandbox.Config{StateDir: state})
	// The sandbox's own /etc files are bound for a non-root engine too.
	if res := run(t, sb, `test "$(hostname)" = "$(cat /etc/hostname)" && getent hosts localhost "$(hostname)"`); res.ExitCode != 0 {
		t.Errorf("hostname and /etc/hosts as a non-root engine: exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if len(want) > 1 {
		checkUserMapped(t, sb, state)
		return
	}
	res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"id", "-u"}, User: "4242"})
	if err == nil {
		t.Fatalf("as 4242 with a single-id map: ran (uid %q); want an error", res.Stdout)
	}
	if !strings.Contains(err.Error(), "outside the ids") {
		t.Errorf("error %q does not say the id is outside the map", err)
	}
	// The sandbox's own user (root inside) still works by name and id.
	for _, u := range []string{"0", "root", "0:0"} {
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"id", "-u"}, User: u})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Errorf("as %q with a single-id map: %q, %v", u, res.Stdout, err)
		}
	}
}

// A command cannot reach into a service to have it fork (its descendants
// the sweep spares): each command has a Landlock domain of its own, so the
// service's /proc/PID/mem, environ and descriptors are closed to it, while
// seeing and signalling it still work, as in a container.
func TestServiceCannotBeHijacked(t *testing.T) {
	if _, err := ll.LandlockGetABIVersion(); err != nil {
		testenv.Missing(t, "Landlock", err.Error())
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3", "the mem and pidfd_getfd probes are python3 programs")
	}
	sb := create(t, sandbox.Config{})
	svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo $$ > svcpid; exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := sb.ReadFile(t.Context(), "svcpid"); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service never started; output %q", svc.Output())
		}
	}
	res := run(t, sb, `p=$(cat svcpid)
python3 -c "open('/proc/$p/mem', 'r+b', buffering=0)" 2>/dev/null && echo mem=ESCAPED
cat /proc/$p/environ >/dev/null 2>&1 && echo environ=ESCAPED
readlink /proc/$p/fd/1 >/dev/null 2>&1 && echo fd-link=ESCAPED
(: > /proc/$p/fd/1) 2>/dev/null && echo fd-open=ESCAPED
python3 -c "
import os, sys
fd = os.pidfd_open($p)
libc = __import__('ctypes').CDLL(None, use_errno=True)
sys.exit(0 if libc.syscall(438, fd, 1, 0) >= 0 else 1)" 2>/dev/null && echo pidfd_getfd=ESCAPED
grep -q sleep /proc/$p/cmdline && echo sees-it
kill -0 $p && echo signals-it`)
	out := string(res.Stdout)
	if strings.Contains(out, "ESCAPED") || !strings.Contains(out, "sees-it") || !strings.Contains(out, "signals-it") {
		t.Errorf("a command and the service: %q (stderr %s); want no ESCAPED, and sees-it, signals-it", out, res.Stderr)
	}
	if _, exited := svc.Exited(); exited {
		t.Errorf("the service exited: %q", svc.Output())
	}
}

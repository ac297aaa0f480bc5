package host

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/sandbox"
)

func newSandbox(t *testing.T) sandbox.Sandbox {
	t.Helper()
	sb, err := New().Create(t.Context(), sandbox.Config{Workdir: "/workspace", StateDir: t.TempDir() + "/state"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(t.Context()) })
	return sb
}

// The host rung has no users: the engine's own, by uid or name (and its
// own group), is accepted and anyone else is an error, never a command run
// as the engine.
func TestUser(t *testing.T) {
	sb := newSandbox(t)
	uid, gid := strconv.Itoa(os.Geteuid()), strconv.Itoa(os.Getegid())
	own := []string{"", uid, uid + ":" + gid}
	if u, err := user.LookupId(uid); err == nil {
		own = append(own, u.Username)
	}
	for _, spec := range own {
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"id", "-u"}, User: spec})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != uid {
			t.Errorf("user %q: %q, %v; want uid %s", spec, res.Stdout, err, uid)
		}
	}
	other := strconv.Itoa(os.Geteuid() + 4242)
	for _, spec := range []string{other, "evalsi-no-such-user", uid + ":" + strconv.Itoa(os.Getegid()+4242)} {
		if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"id", "-u"}, User: spec}); err == nil {
			t.Errorf("user %q ran (uid %s); want an error", spec, res.Stdout)
		} else if !strings.Contains(err.Error(), "no users") {
			t.Errorf("user %q: error %q does not say why", spec, err)
		}
		if _, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}, User: spec}); err == nil {
			t.Errorf("service as user %q started; want an error", spec)
		}
	}
}

// A service's process group, what it started included, is killed at
// Close; the service's pid and its child's are host pids here.
func TestServiceKilledAtClose(t *testing.T) {
	sb := newSandbox(t)
	svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "sleep 600 & echo $$ $! > pids; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for deadline := time.Now().Add(30 * time.Second); len(pids) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := sb.ReadFile(t.Context(), "pids")
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	if len(pids) < 2 {
		t.Fatalf("the service wrote no pids; output %q", svc.Output())
	}
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, exited := svc.Exited(); !exited || code != 128+int(syscall.SIGKILL) {
		t.Errorf("after Close: Exited() = %d, %v; want SIGKILL's 137, true", code, exited)
	}
	for _, pid := range pids {
		// Reaped (the shell by us, the sleep by init): gone, or a zombie
		// on its way.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(b), ") Z") {
			t.Errorf("process %d of the service survived Close: %s", pid, b)
		}
	}
}

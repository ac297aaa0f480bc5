package docker

import (
	"context"
	"strings"
	"testing"

	"evals.si/sandbox"
)

// TestCommandsCannotStopTheContainer: `kill -9 -1` as root (with CAP_KILL)
// cannot reach the keeper, the container's init, so the sandbox keeps
// working.
func TestCommandsCannotStopTheContainer(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "kill -9 -1; sleep 0.5; id -u"}})
	if strings.TrimSpace(string(res.Stdout)) != "0" {
		t.Fatalf("commands should run as root by default: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	after := run(t, sb, sandbox.ExecRequest{Argv: []string{"true"}})
	if after.ExitCode != 0 {
		t.Fatalf("after kill -9 -1: %+v", after)
	}
	// The snapshot image keeps the image's user, not the keeper's.
	layer, err := sb.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := requireDocker(t)
	t.Cleanup(func() { r.RemoveLayer(context.Background(), layer) })
	cli, _ := r.Client()
	if u, err := imageUser(context.Background(), cli, layer.Ref); err != nil || u != "0" {
		t.Fatalf("snapshot image user %q, %v; want 0", u, err)
	}
}

// TestNonRootLeftoversKilled: the sweep runs as the commands' user, so a
// non-root user's daemon does not survive its command.
func TestNonRootLeftoversKilled(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{User: "65534"})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "id -u; setsid sleep 77 </dev/null >/dev/null 2>&1 &"}})
	if strings.TrimSpace(string(res.Stdout)) != "65534" {
		t.Fatalf("want uid 65534: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	ps := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `for d in /proc/[0-9]*; do tr '\0' ' ' < $d/cmdline; echo; done`}})
	if strings.Contains(string(ps.Stdout), "sleep 77") {
		t.Fatalf("the user's leftover survived its command:\n%s", ps.Stdout)
	}
}

func TestUnknownUserRefused(t *testing.T) {
	r := requireDocker(t)
	_, err := r.Create(context.Background(), sandbox.Config{Workdir: "/workspace", User: "no-such-user"})
	if err == nil || !strings.Contains(err.Error(), `user "no-such-user"`) {
		t.Fatalf("Create with an unknown user: %v", err)
	}
}

package environment

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/warm"
	"evals.si/spec"
)

// TestWarmPoolTrials takes trial sandboxes from the bwrap rung's warm pool:
// from the second take on they are hits, each trial's sandbox is its own
// (restored from the setup snapshot, never another trial's), a trial with
// another policy gets a sandbox made for it, and Close drains the pool and
// the background closes before the snapshot goes.
func TestWarmPoolTrials(t *testing.T) {
	m := newManager(t)
	m.WarmPools([]string{sandbox.RungBwrap}, warm.Options{PerKey: 2, MemAvailable: func() (int, error) { return 1 << 20, nil }})
	ctx := context.Background()
	env := &spec.Environment{
		Setup:   spec.Steps("echo ready > setup.txt"),
		Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, Workdir: "/work"},
	}
	p, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{}
	for i := range 6 {
		sb, err := p.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := run(t, sb, "cat setup.txt; ls"); got != "ready\nsetup.txt\n" {
			t.Fatalf("trial %d starts from %q, want only the setup snapshot (another trial's file leaked in?)", i, got)
		}
		host := run(t, sb, "hostname")
		if hosts[host] {
			t.Fatalf("trial %d got sandbox %s a second time", i, strings.TrimSpace(host))
		}
		hosts[host] = true
		run(t, sb, "echo trial > mine.txt")
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if i >= 1 {
			// Let the refill finish, so the next take is a hit.
			deadline := time.Now().Add(20 * time.Second)
			for m.warm.ReadyAll() < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	if st := m.WarmStats(); st.Misses != 2 || st.Hits != 4 {
		t.Errorf("warm stats = %+v, want 2 misses (the first two takes) and 4 hits", st)
	}
	// A read-only root is another configuration: never a pooled sandbox
	// made for the writable one.
	ro := *env
	rop := *env.Sandbox
	rop.ReadOnlyRoot = true
	ro.Sandbox = &rop
	sb, err := p.NewSandbox(ctx, &ro, TrialPolicy(&ro), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "touch /etc/x"}}); err != nil || res.ExitCode == 0 {
		t.Errorf("read-only trial wrote /etc/x (exit %d, %v): it got a writable pooled sandbox", res.ExitCode, err)
	}
	sb.Close(ctx)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	noStateLeft(t, m)
}

// TestCloseNowEndsEverythingFirst: a sandbox made with CloseNow is gone,
// its service killed and its state removed, when Close returns (the
// agent's sandbox before a fresh checker's); one without it may still be
// closing behind the trial, and Manager.Close waits for that.
func TestCloseNowEndsEverythingFirst(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	env := &spec.Environment{Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, Workdir: "/work"}}
	p, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{CloseNow: true})
	if err != nil {
		t.Fatal(err)
	}
	// A duration of this process's own, so no other test's sleep matches.
	secs := strconv.Itoa(1_000_000 + os.Getpid())
	if _, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: []string{"sleep", secs}}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := filepath.Glob(filepath.Join(m.own.dir, "sb-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("after a CloseNow sandbox's Close: %v left (%v)", left, err)
	}
	if out, _ := exec.Command("pgrep", "-f", "^sleep "+secs+"$").Output(); len(out) > 0 {
		t.Fatalf("the closed sandbox's service still runs: pids %s", out)
	}
	later, err := p.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	later.Close(ctx)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	noStateLeft(t, m)
}

package environment

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/reexec"
	"evals.si/spec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	rung := bwraptest.Rung(t)
	imgs, err := image.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return NewManager(imgs, []sandbox.Rung{rung}, t.TempDir(), slog.Default())
}

func run(t *testing.T, sb sandbox.Sandbox, cmd string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", cmd}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q exited %d: %s%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

func TestSetupOncePerEnvironmentAndIsolatedTrials(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	env := &spec.Environment{
		Files:   map[string]string{"a.txt": "from files\n"},
		Setup:   spec.Steps("echo setup-ran >> setup.log", "cat a.txt >> setup.log"),
		Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, Workdir: "/work"},
	}
	p1, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Prepare(ctx, env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 {
		t.Fatal("the same environment was prepared twice")
	}
	if p1.Layer == nil || p1.Rung.Name() != "bwrap" {
		t.Fatalf("prepared = %+v", p1)
	}
	a, err := p1.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := p1.NewSandbox(ctx, env, TrialPolicy(env), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if got := run(t, a, "cat setup.log"); got != "setup-ran\nfrom files\n" {
		t.Fatalf("setup.log in a trial = %q: setup must run exactly once, after files", got)
	}
	run(t, a, "echo only-a > mine.txt")
	if out := run(t, b, "ls"); strings.Contains(out, "mine.txt") {
		t.Fatalf("trial b sees trial a's file: %s", out)
	}
	// A different environment gets its own setup.
	env2 := *env
	env2.Setup = spec.Steps("echo other > setup.log")
	p3, err := m.Prepare(ctx, &env2, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Fatal("a different setup shared the snapshot")
	}
	a.Close(ctx)
	b.Close(ctx)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	noStateLeft(t, m)
}

func TestSetupFailureIsAnInfraError(t *testing.T) {
	m := newManager(t)
	_, err := m.Prepare(context.Background(), &spec.Environment{
		Setup:   spec.Steps("echo about to fail; exit 3"),
		Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}},
	}, SetupOptions{})
	var ie *InfraError
	if !errors.As(err, &ie) || ie.Phase != "setup" || !strings.Contains(err.Error(), "about to fail") {
		t.Fatalf("err = %v, want a setup InfraError carrying the output", err)
	}
}

func TestNoRungIsRefused(t *testing.T) {
	m := newManager(t)
	_, err := m.Prepare(context.Background(), &spec.Environment{Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}, MinIsolation: "vm"}}, SetupOptions{})
	if !errors.Is(err, sandbox.ErrNoRung) {
		t.Fatalf("err = %v, want ErrNoRung: a task asking for vm isolation is refused, never downgraded", err)
	}
}

// A manager that makes no sandbox (evalsi runs list) neither creates its
// state dir nor sweeps it; one that does claims it at its first sandbox.
func TestStateDirClaimedAtFirstSandbox(t *testing.T) {
	imgs, err := image.Open(t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "sandboxes")
	m := NewManager(imgs, []sandbox.Rung{bwraptest.Rung(t)}, state, slog.Default())
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("a manager that made no sandbox touched its state dir: %v", err)
	}
	m = NewManager(imgs, []sandbox.Rung{bwraptest.Rung(t)}, state, slog.Default())
	defer m.Close()
	env := &spec.Environment{Sandbox: &spec.SandboxPolicy{Ladder: []string{"bwrap"}}}
	p, err := m.Prepare(context.Background(), env, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.NewSandbox(context.Background(), env, TrialPolicy(env), SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if procs, _ := filepath.Glob(filepath.Join(state, procDirPrefix+"*")); len(procs) != 1 {
		t.Errorf("process directories after the first sandbox: %v, want one", procs)
	}
}

// noStateLeft fails when a closed manager left anything but its lock in
// the state directory.
func noStateLeft(t *testing.T, m *Manager) {
	t.Helper()
	left, _ := os.ReadDir(m.stateDir)
	for _, e := range left {
		if e.Name() != sweepLock {
			t.Errorf("Close left %s in the state dir", e.Name())
		}
	}
}

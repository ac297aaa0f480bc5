package remote_test

import (
	"strings"
	"testing"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/pool/pooltest"
)

// Each service holds the sandbox's limits of its own, so a pool bounds how
// many one sandbox runs: past four, starting one is refused and nothing
// more runs.
func TestPoolBoundsServicesPerSandbox(t *testing.T) {
	run := pooltest.Start(t, pooltest.Options{})
	p := run.Dial(t, "services")
	sb, err := p.Rung().Create(t.Context(), sandbox.Config{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	for i := range 4 {
		if _, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sleep", "600"}}); err != nil {
			t.Fatalf("service %d: %v", i+1, err)
		}
	}
	_, err = sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "touch fifth; exec sleep 600"}})
	if err == nil || !strings.Contains(err.Error(), "4 services") {
		t.Fatalf("a fifth service: %v; want it refused, naming the pool's most per sandbox", err)
	}
	// A started service may not have exec'd sleep yet on a loaded machine:
	// wait (briefly) for all four, while the fifth must never appear.
	var res sandbox.ExecResult
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		res, err = sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "test ! -e fifth && ps -e -o comm= | grep -c '^sleep$'"}})
		if err != nil || strings.TrimSpace(string(res.Stdout)) == "4" || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "4" {
		t.Errorf("after the refusal: %+v %v; want the fifth never run and 4 sleeps", res, err)
	}
}

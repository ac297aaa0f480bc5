package userns

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"evals.si/internal/testenv/engineuser"
	"evals.si/sandbox/reexec"
)

// Start as a non-root engine, through newuidmap (evalsi-test, which
// .ci/setup gives a range in /etc/subuid and /etc/subgid) and with the
// single-id map (nobody): TestStartAsUser, run as root, re-runs this test
// binary's TestStartInner as each (internal/testenv/engineuser).

// echoHelper prints what a helper of this binary started through Start
// sees: its uid, its arguments, and one variable of its environment.
const echoHelper = "evalsi-userns-test-echo"

func init() {
	reexec.RegisterEarly(echoHelper, func(args []string) int {
		fmt.Printf("%d %s %s\n", os.Getuid(), strings.Join(args, ","), os.Getenv("EVALSI_TEST_KEPT"))
		return 0
	})
}

func TestStartAsUser(t *testing.T) { engineuser.RerunEach(t, "TestStartInner") }

// TestStartInner (the inner run): ForEngine picks newuidmap's map or the
// single-id one; Start runs a program as root inside with that map, and a
// helper of this binary as itself (its reexec name, arguments and the
// engine's environment intact); Namespace makes a namespace with the map.
func TestStartInner(t *testing.T) {
	mode := "single"
	if len(engineuser.WantUIDMap(t)) > 1 {
		mode = "helper"
	}
	m, note, err := ForEngine()
	if err != nil {
		t.Fatal(err)
	}
	if m.helper != (mode == "helper") || m.Full() != (mode == "helper") {
		t.Fatalf("ForEngine as uid %d: %+v (%s), want mode %s", os.Getuid(), m, note, mode)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("sh", "-c", "id -u; cat /proc/self/uid_map /proc/self/gid_map")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.Start(cmd, self); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var want strings.Builder
	want.WriteString("0\n")
	for _, ms := range [][]Mapping{m.UID, m.GID} {
		for _, x := range ms {
			fmt.Fprintf(&want, "%d %d %d\n", x.Inside, x.Outside, x.Count)
		}
	}
	var got strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got.WriteString(strings.Join(strings.Fields(l), " ") + "\n")
	}
	if got.String() != want.String() {
		t.Errorf("id -u, uid_map, gid_map inside:\n%s\nwant\n%s", got.String(), want.String())
	}

	// A helper of this binary, with the engine's environment (Env nil).
	t.Setenv("EVALSI_TEST_KEPT", "kept")
	t.Setenv(reexec.Env, echoHelper)
	cmd = exec.Command(self, "a", "b")
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.Start(cmd, self); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || out.String() != "0 a,b kept\n" {
		t.Errorf("a helper started through Start: %v, %q; want %q", err, out.String(), "0 a,b kept\n")
	}

	ns, err := m.Namespace(self)
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
}

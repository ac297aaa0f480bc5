package userns

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox/reexec"
)

// Start as a non-root engine, through newuidmap (evalsi-test, which
// .ci/setup gives a range in /etc/subuid and /etc/subgid) and with the
// single-id map (nobody): TestStartAsUser, run as root, re-runs this test
// binary's TestStartInner as each.

const innerEnv = "EVALSI_TEST_USERNS_INNER"

// echoHelper prints what a helper of this binary started through Start
// sees: its uid, its arguments, and one variable of its environment.
const echoHelper = "evalsi-userns-test-echo"

func init() {
	reexec.RegisterEarly(echoHelper, func(args []string) int {
		fmt.Printf("%d %s %s\n", os.Getuid(), strings.Join(args, ","), os.Getenv("EVALSI_TEST_KEPT"))
		return 0
	})
}

func TestStartAsUser(t *testing.T) {
	if os.Getenv(innerEnv) != "" {
		t.Skip("the inner run")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "re-running the tests as other users needs root")
	}
	if _, err := exec.LookPath("newuidmap"); err != nil {
		testenv.Missing(t, "newuidmap", "apt-get install uidmap (.ci/setup)")
	}
	for _, tc := range []struct{ user, mode string }{{"evalsi-test", "helper"}, {"nobody", "single"}} {
		t.Run(tc.user, func(t *testing.T) {
			u, err := user.Lookup(tc.user)
			if err != nil {
				testenv.Missing(t, "user "+tc.user, err.Error()+"; run .ci/setup")
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			// The build directory is 0700 root: copy the binary where
			// the user can run it.
			dir, err := os.MkdirTemp("", "evalsi-userns-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			os.Chmod(dir, 0o755)
			bin := filepath.Join(dir, "userns.test")
			data, err := os.ReadFile(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, data, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), bin, "-test.run=^TestStartInner$", "-test.v", "-test.count=1")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), innerEnv+"="+tc.mode)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestStartInner") {
				t.Fatalf("TestStartInner as %s: %v\n%s", tc.user, err, out)
			}
		})
	}
}

// TestStartInner (the inner run): ForEngine picks newuidmap's map or the
// single-id one; Start runs a program as root inside with that map, and a
// helper of this binary as itself (its reexec name, arguments and the
// engine's environment intact); Namespace makes a namespace with the map.
func TestStartInner(t *testing.T) {
	mode := os.Getenv(innerEnv)
	if mode == "" {
		t.Skip("run by TestStartAsUser as another user")
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

package landlock

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/engineuser"
	"evals.si/sandbox"
)

// The engine's paths as a non-root user: TestNonRootEngine, run as root,
// runs this test binary's TestAsEngineUser as evalsi-test (a range in
// /etc/subuid: newuidmap writes 0 -> its uid, 1-65535 -> the range) and as
// nobody (no range: only root maps, to nobody). The same pair of tests is
// in sandbox/bwrap; internal/testenv/engineuser does the re-running.

func TestNonRootEngine(t *testing.T) {
	if engineuser.Inner() {
		t.Skip("the inner run")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "re-running the tests as other users needs root")
	}
	for _, tc := range []struct{ user, why string }{
		{"evalsi-test", "the user .ci/setup makes, with a range in /etc/subuid"},
		{"nobody", "a user with no subordinate range"},
	} {
		t.Run(tc.user, func(t *testing.T) { engineuser.Rerun(t, tc.user, tc.why, "TestAsEngineUser") })
	}
}

// TestAsEngineUser (the inner run): a sandbox without an image has the
// expected map inside and in its report, whose notes say which map it is;
// root inside holds Docker's capabilities (in its namespace) but cannot
// write a global sysctl; a command works; switching to another user works
// with a range and fails with the single-id map.
func TestAsEngineUser(t *testing.T) {
	want := engineuser.WantUIDMap(t)
	full := len(want) > 1
	sb := newSandbox(t, sandbox.Config{})

	res := run(t, sb, "sh", "-c", "id -u; cat /proc/self/uid_map")
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	var got []string
	for _, l := range lines[min(1, len(lines)):] {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if res.ExitCode != 0 || len(lines) == 0 || lines[0] != "0" || !slices.Equal(got, want) {
		t.Errorf("id -u and uid_map inside: exit %d %q (stderr %q), want 0 and %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}

	rep := sb.Report()
	t.Logf("uid_map inside %q; report uid map %q", got, rep.UIDMap)
	var wantRep []string
	for _, w := range want {
		f := strings.Fields(w)
		in, _ := strconv.Atoi(f[0])
		out, _ := strconv.Atoi(f[1])
		n, _ := strconv.Atoi(f[2])
		wantRep = append(wantRep, fmt.Sprintf("%d-%d -> %d-%d", in, in+n-1, out, out+n-1))
	}
	if !slices.Equal(rep.UIDMap, wantRep) {
		t.Errorf("report uid map %q, want %q", rep.UIDMap, wantRep)
	}
	note := "only root maps"
	if full {
		note = "written by newuidmap"
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, note) }) {
		t.Errorf("report notes lack %q: %q", note, rep.Notes)
	}
	// The launcher is root of its namespace with either map.
	if !slices.Equal(rep.Capabilities, sandbox.ContainerCapabilities) {
		t.Errorf("report capabilities %q, want %q", rep.Capabilities, sandbox.ContainerCapabilities)
	}
	res = run(t, sb, "grep", "CapEff", "/proc/self/status")
	if f := strings.Fields(string(res.Stdout)); len(f) != 2 || !slices.Equal(capNames(t, f[1]), slices.Sorted(slices.Values(sandbox.ContainerCapabilities))) {
		t.Errorf("capabilities inside: %q, want Docker's set", res.Stdout)
	}

	before, _ := os.ReadFile("/proc/sys/vm/swappiness")
	res = run(t, sb, "sh", "-c", "echo 7 > /proc/sys/vm/swappiness && echo WROTE")
	if after, _ := os.ReadFile("/proc/sys/vm/swappiness"); string(after) != string(before) || strings.Contains(string(res.Stdout), "WROTE") {
		t.Errorf("the sandbox wrote vm.swappiness (%q -> %q; stdout %q)", before, after, res.Stdout)
	}

	res = run(t, sb, "sh", "-c", "echo hello > f && cat f")
	if res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
		t.Errorf("a normal command: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	res = run(t, sb, "setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "id", "-u")
	switch {
	case full && (res.ExitCode != 0 || string(res.Stdout) != "1000\n"):
		t.Errorf("switching to uid 1000 with a range: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	case !full && res.ExitCode == 0:
		t.Errorf("switching to uid 1000 with the single-id map succeeded: stdout %q", res.Stdout)
	}
}

package landlock

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// The engine's paths as a non-root user: TestNonRootEngine, run as root,
// runs this test binary's TestAsEngineUser as evalsi-test (a range in
// /etc/subuid: newuidmap writes 0 -> its uid, 1-65535 -> the range) and as
// nobody (no range: only root maps, to nobody). The same pair of tests is
// in sandbox/bwrap (test binaries cannot share test code, and a shared
// package that starts processes would need a place in internal/tripwire).

// engineUserEnv marks the inner run; its value is the uid_map the sandbox
// must have, lines joined by ";".
const engineUserEnv = "EVALSI_TEST_ENGINE_UID_MAP"

func TestNonRootEngine(t *testing.T) {
	if os.Getenv(engineUserEnv) != "" {
		t.Skip("the inner run")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "re-running the tests as other users needs root")
	}
	for _, tc := range []struct{ user, why string }{
		{"evalsi-test", "the user .ci/setup makes, with a range in /etc/subuid"},
		{"nobody", "a user with no subordinate range"},
	} {
		t.Run(tc.user, func(t *testing.T) { runAsEngineUser(t, tc.user, tc.why, "TestAsEngineUser") })
	}
}

// runAsEngineUser re-runs the test binary's inner test as name, with the
// uid_map its sandboxes must get, and fails with its output if it fails or
// skips.
func runAsEngineUser(t *testing.T, name, why, inner string) {
	u, err := user.Lookup(name)
	if err != nil {
		testenv.Missing(t, "user "+name, fmt.Sprintf("%s (%s): %v; run .ci/setup", why, name, err))
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if _, err := exec.LookPath("newuidmap"); err != nil {
		testenv.Missing(t, "newuidmap", "apt-get install uidmap (.ci/setup)")
	}
	want := []string{fmt.Sprintf("0 %d 1", uid)}
	sub, ok := subuidRange(t, name)
	if ok {
		want = append(want, fmt.Sprintf("1 %d %d", sub[0], min(sub[1], 65535)))
	} else if name != "nobody" {
		testenv.Missing(t, "a subordinate range for "+name, "no line for it in /etc/subuid; run .ci/setup")
	}

	// The user must be able to run the binary and own a temporary
	// directory: the build's directory is 0700 root.
	dir, err := os.MkdirTemp("", "evalsi-engine-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(t.Context(), bin, "-test.run=^"+inner+"$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), engineUserEnv+"="+strings.Join(want, ";"), "TMPDIR="+tmp, "HOME="+tmp, "USER="+name, "LOGNAME="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as %s (uid %d): %v\n%s", inner, name, uid, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+inner) {
		t.Fatalf("%s as %s did not pass (skipped?):\n%s", inner, name, out)
	}
	t.Logf("%s as %s:\n%s", inner, name, out)
}

// subuidRange returns name's first range (start, count) in /etc/subuid.
func subuidRange(t *testing.T, name string) ([2]int, bool) {
	f, err := os.Open("/etc/subuid")
	if err != nil {
		return [2]int{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) == 3 && fs[0] == name {
			start, _ := strconv.Atoi(fs[1])
			count, _ := strconv.Atoi(fs[2])
			return [2]int{start, count}, true
		}
	}
	return [2]int{}, false
}

// TestAsEngineUser (the inner run): a sandbox without an image has the
// expected map inside and in its report, whose notes say which map it is;
// root inside holds Docker's capabilities (in its namespace) but cannot
// write a global sysctl; a command works; switching to another user works
// with a range and fails with the single-id map.
func TestAsEngineUser(t *testing.T) {
	wantMap := os.Getenv(engineUserEnv)
	if wantMap == "" {
		t.Skip("run by TestNonRootEngine as another user")
	}
	want := strings.Split(wantMap, ";")
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

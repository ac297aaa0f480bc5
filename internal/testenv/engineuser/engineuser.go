// Package engineuser re-runs a test binary's test as another user, so a
// rung's non-root engine paths (newuidmap with a range in /etc/subuid, or
// the single-id map) are tested for real by a root test run: the outer test
// calls Rerun, the inner one reads what its sandboxes must show with
// WantUIDMap. Test support only; it needs root, the users .ci/setup makes
// and newuidmap.
package engineuser

import (
	"bufio"
	"fmt"
	"io"
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
	"evals.si/sandbox/sandboxtest"
)

// Env marks the inner run; its value is the uid_map the sandbox must have,
// lines joined by ";".
const Env = "EVALSI_TEST_ENGINE_UID_MAP"

// Inner reports whether this is the inner run.
func Inner() bool { return os.Getenv(Env) != "" }

// WantUIDMap is the inner run's expected uid_map lines ("0 UID 1", and
// "1 START COUNT" with a range); it skips the test outside an inner run.
func WantUIDMap(t *testing.T) []string {
	t.Helper()
	v := os.Getenv(Env)
	if v == "" {
		t.Skip("run by TestNonRootEngine as another user")
	}
	return strings.Split(v, ";")
}

// Rerun re-runs the test binary's inner test as name, with the
// uid_map its sandboxes must get, and fails with its output if it fails or
// skips.
func Rerun(t *testing.T, name, why, inner string) {
	t.Helper()
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
	copyFile(t, os.Args[0], bin)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(t.Context(), bin, "-test.run=^"+inner+"$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), Env+"="+strings.Join(want, ";"), "TMPDIR="+tmp, "HOME="+tmp, "USER="+name, "LOGNAME="+name)
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

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// RerunEach re-runs inner as each engine user .ci/setup provides for it:
// evalsi-test, with a range in /etc/subuid (newuidmap writes 0 -> its uid,
// 1-65535 -> the range), and nobody, with none (only root maps, to nobody).
func RerunEach(t *testing.T, inner string) {
	t.Helper()
	if Inner() {
		t.Skip("the inner run")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "re-running the tests as other users needs root")
	}
	for _, tc := range []struct{ user, why string }{
		{"evalsi-test", "the user .ci/setup makes, with a range in /etc/subuid"},
		{"nobody", "a user with no subordinate range"},
	} {
		t.Run(tc.user, func(t *testing.T) { Rerun(t, tc.user, tc.why, inner) })
	}
}

// Check is the inner run's check of a sandbox without an image: uid 0
// inside with the expected map, which its report states with a note saying
// which map it is; the report's capabilities are wantCaps and so is the
// effective set inside; root inside cannot write a global sysctl; a
// command works; switching to another user works with a range and fails
// with the single-id map.
func Check(t *testing.T, sb sandbox.Sandbox, wantCaps []string) {
	t.Helper()
	want := WantUIDMap(t)
	full := len(want) > 1
	sh := func(script string) sandbox.ExecResult {
		t.Helper()
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return res
	}

	res := sh("id -u; cat /proc/self/uid_map")
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
		var in, out, n int
		fmt.Sscanf(w, "%d %d %d", &in, &out, &n)
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
	if !slices.Equal(rep.Capabilities, wantCaps) {
		t.Errorf("report capabilities %q, want %q", rep.Capabilities, wantCaps)
	}
	res = sh("grep CapEff /proc/self/status")
	if f := strings.Fields(string(res.Stdout)); len(f) != 2 || !slices.Equal(sandboxtest.CapNames(t, f[1]), slices.Sorted(slices.Values(wantCaps))) {
		t.Errorf("capabilities inside: %q, want %q", res.Stdout, wantCaps)
	}

	before, _ := os.ReadFile("/proc/sys/vm/swappiness")
	res = sh("echo 7 > /proc/sys/vm/swappiness && echo WROTE")
	if after, _ := os.ReadFile("/proc/sys/vm/swappiness"); string(after) != string(before) || strings.Contains(string(res.Stdout), "WROTE") {
		t.Errorf("the sandbox wrote vm.swappiness (%q -> %q; stdout %q)", before, after, res.Stdout)
	}

	res = sh("echo hello > f && cat f")
	if res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
		t.Errorf("a normal command: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	res = sh("setpriv --reuid 1000 --regid 1000 --clear-groups id -u")
	switch {
	case full && (res.ExitCode != 0 || string(res.Stdout) != "1000\n"):
		t.Errorf("switching to uid 1000 with a range: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	case !full && res.ExitCode == 0:
		t.Errorf("switching to uid 1000 with the single-id map succeeded: stdout %q", res.Stdout)
	}
}

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
	"strconv"
	"strings"
	"syscall"
	"testing"

	"evals.si/internal/testenv"
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

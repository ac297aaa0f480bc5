package helper_test

import (
	"bytes"
	"encoding/json"
	"evals.si/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/sandbox/pod/internal/helper"
)

// The helper runs here as a host process (as it runs as a pod's process):
// the same binary the pod rung copies into its pods.
func buildHelper(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "evalsi-pod-helper")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/evalsi-pod-helper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the helper: %v\n%s", err, out)
	}
	return bin
}

type outcome struct {
	stdout, stderr string
	res            helper.Result
}

func call(t *testing.T, bin string, req helper.Request, stdin string) outcome {
	t.Helper()
	var in bytes.Buffer
	if err := helper.WriteRequest(&in, req); err != nil {
		t.Fatal(err)
	}
	in.WriteString(stdin)
	cmd := exec.Command(bin, "run")
	cmd.Stdin = &in
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	var o outcome
	var so, se strings.Builder
	got := false
	for {
		kind, p, err := helper.ReadFrame(&out, nil)
		if err != nil {
			break
		}
		switch kind {
		case helper.FrameStdout:
			so.Write(p)
		case helper.FrameStderr:
			se.Write(p)
		case helper.FrameResult:
			got = true
			if err := json.Unmarshal(p, &o.res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !got {
		t.Fatalf("no result frame")
	}
	o.stdout, o.stderr = so.String(), se.String()
	return o
}

func TestRun(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the helper switches users: it runs as root, as in a pod")
	}
	bin := buildHelper(t)
	dir := t.TempDir()
	env := []string{"PATH=/usr/bin:/bin"}
	shReq := func(script string) helper.Request {
		return helper.Request{Op: helper.OpExec, Argv: []string{"sh", "-c", script}, Env: env, Workdir: dir, Timeout: 20 * time.Second}
	}

	o := call(t, bin, shReq("echo out; echo err >&2; pwd; exit 3"), "")
	if o.res.ExitCode != 3 || o.stdout != "out\n"+dir+"\n" || o.stderr != "err\n" {
		t.Errorf("exec: %+v", o)
	}

	// A double-forked setsid daemon is killed when the command ends.
	pidFile := filepath.Join(dir, "daemon.pid")
	o = call(t, bin, shReq("setsid sh -c 'sleep 300 & echo $! > "+pidFile+"' & sleep 0.2"), "")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("daemon pid: %v (%+v)", err, o)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("the daemon %d left by the command is still running", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}

	req := shReq("sleep 30")
	req.Timeout = 300 * time.Millisecond
	if o = call(t, bin, req, ""); !o.res.TimedOut || o.res.ExitCode == 0 {
		t.Errorf("timeout: %+v", o.res)
	}

	req = shReq("head -c 5000 /dev/zero")
	req.OutputLimit = 100
	if o = call(t, bin, req, ""); len(o.stdout) != 100 || !o.res.Truncated || o.res.ExitCode != 0 {
		t.Errorf("output limit: %d bytes, %+v", len(o.stdout), o.res)
	}

	req = shReq("tr a-z A-Z")
	req.Stdin = true
	if o = call(t, bin, req, "hello"); o.stdout != "HELLO" {
		t.Errorf("stdin: %q", o.stdout)
	}

	req = shReq(`echo "$(id -u) $HOME"`)
	req.User = "65534:65534"
	req.Workdir = "/" // the test's directory is root's, mode 0700
	if o = call(t, bin, req, ""); !strings.HasPrefix(o.stdout, "65534 ") {
		t.Errorf("user 65534: %q %+v", o.stdout, o.res)
	}
	req.User = "evalsi-no-such-user"
	if o = call(t, bin, req, ""); o.res.Error == "" {
		t.Errorf("an unknown user must fail the call: %+v", o.res)
	}

	if o = call(t, bin, helper.Request{Op: helper.OpExec, Argv: []string{"evalsi-no-such-command"}, Env: env, Workdir: dir}, ""); o.res.ExitCode != 127 || o.res.Error != "" {
		t.Errorf("missing command: %+v", o.res)
	}

	f := filepath.Join(dir, "a/b/file")
	if o = call(t, bin, helper.Request{Op: helper.OpWrite, Path: f, Mode: 0o751}, "data"); o.res.Error != "" {
		t.Fatalf("write: %s", o.res.Error)
	}
	if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o751 {
		t.Errorf("written file: %v %v", st, err)
	}
	if o = call(t, bin, helper.Request{Op: helper.OpRead, Path: f}, ""); o.stdout != "data" {
		t.Errorf("read: %+v", o)
	}
	if o = call(t, bin, helper.Request{Op: helper.OpRead, Path: filepath.Join(dir, "nope")}, ""); !o.res.NotExist {
		t.Errorf("read of a missing file: %+v", o.res)
	}
	if o = call(t, bin, helper.Request{Op: helper.OpRead, Path: dir}, ""); o.res.Error == "" || o.res.NotExist {
		t.Errorf("read of a directory: %+v", o.res)
	}
}

package landlock

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

// hostPids are the host's processes whose argv is exactly argv.
func hostPids(t *testing.T, argv ...string) []int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(d))
			out = append(out, pid)
		}
	}
	return out
}

// hostUID is the real uid a host process runs as.
func hostUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ := strconv.Atoi(strings.Fields(v)[0])
			return uid
		}
	}
	t.Fatalf("no Uid line for pid %d", pid)
	return -1
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// TestServiceOutlivesCommandsNotTheirLeftovers: a service is spared by the
// sweep after each command, while a command's background process — also
// one that called setsid — is still killed; a command cannot see (so
// cannot signal) the service's processes; the service runs as its user,
// which maps to the subordinate id outside; Close kills it.
func TestServiceOutlivesCommandsNotTheirLeftovers(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	ctx := context.Background()
	svcArgv := []string{"sleep", "7654321"}
	user := ""
	if sb.idmap.Full() {
		user = "4242"
	}
	svc, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: svcArgv, User: user})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the service's process", func() bool { return len(hostPids(t, svcArgv...)) == 1 })
	svcPid := hostPids(t, svcArgv...)[0]
	if user != "" {
		want, _ := sb.idmap.HostUID(4242)
		if got := hostUID(t, svcPid); got != want {
			t.Errorf("the service as user 4242 runs as host uid %d, want %d (the map's)", got, want)
		}
	}

	// The pattern is written so that the script's own argv does not match.
	res := run(t, sb, "sh", "-c", `setsid sleep 1357913 & sleep 2468024 & sleep 0.2
for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done | grep -c '765432[1]' || true`)
	if got := strings.TrimSpace(string(res.Stdout)); got != "0" {
		t.Errorf("a command sees the service's processes in its /proc (%s matches; stderr %q)", got, res.Stderr)
	}
	for _, left := range [][]string{{"sleep", "1357913"}, {"sleep", "2468024"}} {
		if pids := hostPids(t, left...); len(pids) > 0 {
			t.Errorf("a command's leftover %q survived it: pids %v", left, pids)
		}
	}
	run(t, sb, "true")
	if pids := hostPids(t, svcArgv...); !slices.Equal(pids, []int{svcPid}) {
		t.Fatalf("the service did not survive two commands: pids %v, want [%d]", pids, svcPid)
	}
	if _, exited := svc.Exited(); exited {
		t.Fatal("the service reports exited while running")
	}
	sb.Close(ctx)
	if _, exited := svc.Exited(); !exited {
		t.Error("the service does not report exited after Close")
	}
	if pids := hostPids(t, svcArgv...); len(pids) > 0 {
		t.Errorf("the service's process outlived Close: %v", pids)
	}
}

// TestExecUserMap: a user outside the namespace's map is an error saying
// so, never a command run as someone else; inside it the ids are the
// user's and no capability is left.
func TestExecUserMap(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	ctx := context.Background()
	if !sb.idmap.Full() {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"id"}, User: "4242"})
		if err == nil || !strings.Contains(err.Error(), "outside the ids this sandbox's user namespace maps") {
			t.Fatalf("Exec as 4242 with a map of root alone: %v, want an outside-the-map error", err)
		}
		return
	}
	_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"id"}, User: "70000"})
	if err == nil || !strings.Contains(err.Error(), "id 70000 is outside the ids this sandbox's user namespace maps") {
		t.Fatalf("Exec as 70000: %v, want an outside-the-map error", err)
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", `id -u; id -G; echo $HOME; grep -E '^Cap(Eff|Prm|Inh|Amb)' /proc/self/status | tr -s '\t' ' '`}, User: "4242:4243"})
	if err != nil {
		t.Fatal(err)
	}
	want := "4242\n4243\n/\nCapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapAmb: 0000000000000000\n"
	if string(res.Stdout) != want {
		t.Fatalf("as 4242:4243: stdout %q stderr %q, want %q", res.Stdout, res.Stderr, want)
	}
}

// TestEtcFilesWithReadOnlyRoot: an image without the /etc files and a
// read-only root still gets them (their mount points are made before the
// root turns read-only), and its hostname is the UTS one.
func TestEtcFilesWithReadOnlyRoot(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Root: miniRoot(t), ReadOnlyRoot: true})
	// The image has cat, not grep.
	res := run(t, sb, "cat", "/etc/hostname", "/proc/sys/kernel/hostname", "/etc/hosts", "/etc/resolv.conf")
	lines := strings.Split(string(res.Stdout), "\n")
	if res.ExitCode != 0 || len(lines) < 10 || len(lines[0]) != 12 || lines[0] != lines[1] ||
		lines[2] != "127.0.0.1\tlocalhost" || !strings.Contains(string(res.Stdout), "127.0.1.1\t"+lines[0]+"\n") || !strings.Contains(string(res.Stdout), "nameserver ") {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestSnapshotLeavesEtcMountPointsOut: the mount points the holder made
// for the /etc files are left out of a snapshot, and removing them
// follows no symlink the sandbox made meanwhile: here /etc, made by the
// holder (the image has none), is moved away and replaced by a link to a
// host directory holding an empty "hosts", which must survive.
func TestSnapshotLeavesEtcMountPointsOut(t *testing.T) {
	root := miniRoot(t)
	if err := os.RemoveAll(filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	bait := t.TempDir()
	if err := os.WriteFile(filepath.Join(bait, "hosts"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, sandbox.Config{Root: root})
	res := run(t, sb, "sh", "-c", "cat /etc/hostname >/dev/null && mv /etc /etc.old && ln -s "+bait+" /etc")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if _, err := sb.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bait, "hosts")); err != nil {
		t.Fatalf("removing the mount points reached a host file through the sandbox's symlink: %v", err)
	}
	// Plain case: a fresh sandbox's mount points are not in its layer.
	sb2 := newSandbox(t, sandbox.Config{Root: root})
	run(t, sb2, "true")
	layer2, err := sb2.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range etcFiles {
		if _, err := os.Lstat(filepath.Join(layer2.Dir, f)); err == nil {
			t.Errorf("the layer holds the mount point %s", f)
		}
	}
}

// TestEtcFilesWithinDiskLimit: the /etc files are writable by root inside,
// so they live on the disk_mb tmpfs with the rest of the writable state.
func TestEtcFilesWithinDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root engine", "disk_mb's tmpfs needs the engine to be root")
	}
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 16}})
	res := run(t, sb, "sh", "-c", "head -c 40000000 /dev/zero >> /etc/hosts; wc -c < /etc/hosts")
	if n, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout))); n > 16<<20 || n == 0 {
		t.Fatalf("/etc/hosts grew to %q bytes past disk_mb 16 (stderr %q)", res.Stdout, res.Stderr)
	}
}

// TestCommandHoldsNoSandboxDescriptors: a command, as root and as a user,
// has only its stdin, stdout and stderr: none of the holder's control
// socket, the launcher's status pipe or the cgroup.procs files the engine
// opened.
func TestCommandHoldsNoSandboxDescriptors(t *testing.T) {
	// And none the engine holds without close-on-exec (as one inherited
	// from its parent would be).
	// A high number: children's passed descriptors take the low ones.
	leak, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	if err := unix.Dup3(int(leak.Fd()), 200, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(200)
	sb := newSandbox(t, sandbox.Config{})
	users := []string{""}
	if sb.idmap.Full() {
		users = append(users, "4242")
	}
	for _, u := range users {
		// ls lists the shell's descriptors ("; true" keeps the shell
		// from becoming ls).
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "ls /proc/$$/fd; true"}, User: u})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Fields(string(res.Stdout)), " "); got != "0 1 2" {
			t.Errorf("user %q: the command's descriptors are %q (stderr %q), want 0 1 2", u, got, res.Stderr)
		}
	}
}

// engineName is a stand-in engine for TestSandboxDiesWithEngine: it
// starts a service in a new sandbox, says so, and waits to be killed.
const engineName = "landlock-test-engine"

func init() {
	reexec.Register(engineName, func(args []string) int {
		sb, err := New().Create(context.Background(), sandbox.Config{Workdir: "/workspace", StateDir: args[0]})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if _, err := sb.StartService(context.Background(), sandbox.ExecRequest{Argv: []string{"sleep", "8765432"}}); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("ready")
		select {}
	})
}

// TestSandboxDiesWithEngine: a killed engine leaves no sandbox running —
// the holder sees its control socket close and exits, and its PID
// namespace, services included, dies with it.
func TestSandboxDiesWithEngine(t *testing.T) {
	requireLandlock(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, t.TempDir())
	cmd.Env = append(os.Environ(), reexec.Env+"="+engineName)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("stand-in engine: %q", line)
	}
	if len(hostPids(t, "sleep", "8765432")) != 1 {
		t.Fatal("the service is not running")
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, "the service to die with the engine", func() bool { return len(hostPids(t, "sleep", "8765432")) == 0 })
}

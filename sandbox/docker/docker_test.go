package docker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

func requireDocker(t testing.TB) *Rung {
	t.Helper()
	r := New()
	if p := r.Probe(context.Background()); !p.Works {
		testenv.Missing(t, "docker", p.Reason)
	}
	return r
}

func newSandbox(t testing.TB, cfg sandbox.Config) *Sandbox {
	t.Helper()
	r := requireDocker(t)
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	sb, err := r.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb.(*Sandbox)
}

func run(t testing.TB, sb sandbox.Sandbox, req sandbox.ExecRequest) sandbox.ExecResult {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	res, err := sb.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return res
}

func TestExecAndFiles(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, sandbox.Config{Env: map[string]string{"FROM_CONFIG": "c"}})
	if err := sb.WriteFile(ctx, "sub/dir/in.txt", []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := run(t, sb, sandbox.ExecRequest{
		Argv:  []string{"sh", "-c", `pwd; echo "$FROM_CONFIG $FROM_REQ"; cat sub/dir/in.txt; stat -c %a sub/dir/in.txt; cat > out.txt; echo err >&2; exit 3`},
		Env:   map[string]string{"FROM_REQ": "r"},
		Stdin: []byte("from stdin"),
	})
	want := "/workspace\nc r\nhello600\n"
	if string(res.Stdout) != want || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got exit %d stdout %q stderr %q; want exit 3 stdout %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	if b, err := sb.ReadFile(ctx, "/workspace/out.txt"); err != nil || string(b) != "from stdin" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := sb.ReadFile(ctx, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile(missing) error %v, want ErrNotExist", err)
	}
}

func TestNetworkDenyHasOnlyLoopback(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"ls", "/sys/class/net"}})
	if strings.TrimSpace(string(res.Stdout)) != "lo" {
		t.Fatalf("interfaces %q, want only lo", res.Stdout)
	}
}

func TestOOMDenial(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3", "the memory hog is a python3 script")
	}
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{MemoryMB: 64}})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", "x = bytearray(512 << 20); x[::4096] = b'x' * len(x[::4096]); print('ALLOCATED')"}})
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "ALLOCATED") {
		t.Fatalf("512 MiB touched under a 64 MiB limit: %+v", res)
	}
	if len(res.Denials) == 0 || res.Denials[0].Kind != "oom" {
		t.Fatalf("denials %+v (exit %d), want oom", res.Denials, res.ExitCode)
	}
}

func TestLeftoversAndTimeout(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `setsid sh -c 'sleep 1000 & :' & sleep 0.3`}})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`}})
	if strings.Contains(string(res.Stdout), "sleep 1000") {
		t.Fatalf("daemon survived its command: %q", res.Stdout)
	}
	res = run(t, sb, sandbox.ExecRequest{Argv: []string{"sleep", "100"}, Timeout: 300 * time.Millisecond})
	if !res.TimedOut || len(res.Denials) == 0 || res.Denials[0].Kind != "timeout" {
		t.Fatalf("got %+v, want a timeout", res)
	}
	// The sandbox still works after a timeout.
	if res := run(t, sb, sandbox.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Fatalf("exec after timeout: %+v", res)
	}
}

func TestRemovedAtClose(t *testing.T) {
	r := requireDocker(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, sandbox.Config{Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.(*Sandbox).ContainerID()
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cli, _ := r.Client()
	if _, err := cli.ContainerInspect(ctx, id); !client.IsErrNotFound(err) {
		t.Fatalf("container %s still exists after Close (inspect: %v)", id, err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestImageRootSnapshot imports a small root, changes it, snapshots it and
// starts two sandboxes from the snapshot.
func TestImageRootSnapshot(t *testing.T) {
	ctx := context.Background()
	root := miniRoot(t)
	for _, ro := range []bool{false, true} {
		sb := newSandbox(t, sandbox.Config{Root: root, ReadOnlyRoot: ro})
		res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /etc/os-release seed.txt; echo w > made.txt; echo x > /etc/added"}})
		if !strings.HasPrefix(string(res.Stdout), "ID=mini\nseed") {
			t.Fatalf("ro=%v: stdout %q stderr %q", ro, res.Stdout, res.Stderr)
		}
		if (res.ExitCode == 0) == ro {
			t.Fatalf("ro=%v: writing /etc exit %d", ro, res.ExitCode)
		}
		layer, err := sb.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sb.Close(ctx)
		t.Cleanup(func() { New().RemoveLayer(context.Background(), layer) })
		for range 2 {
			sb2 := newSandbox(t, sandbox.Config{Root: root, Layers: []sandbox.Layer{layer}, ReadOnlyRoot: ro})
			res := run(t, sb2, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat made.txt; echo trial > made.txt"}})
			if res.ExitCode != 0 || string(res.Stdout) != "w\n" {
				t.Fatalf("ro=%v: from snapshot: exit %d stdout %q stderr %q", ro, res.ExitCode, res.Stdout, res.Stderr)
			}
			sb2.Close(ctx)
		}
	}
}

// miniRoot builds a small root holding dash, coreutils pieces and their
// libraries.
func miniRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	copyBinaries(t, root, "/usr/bin/dash", "/usr/bin/cat", "/usr/bin/sleep", "/usr/bin/true", "/usr/bin/mkdir", "/usr/bin/ln", "/usr/bin/mkfifo", "/usr/bin/dd", "/usr/bin/ls")
	for _, d := range []string{"bin", "etc", "tmp", "workspace", "proc", "dev", "sys", "sbin"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Symlink("/usr/bin/dash", filepath.Join(root, "bin/sh"))
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("ID=mini\n"), 0o644)
	os.WriteFile(filepath.Join(root, "workspace/seed.txt"), []byte("seed"), 0o644)
	return root
}

// copyBinaries copies the host's binaries and the libraries they load
// into root at the same paths.
func copyBinaries(t testing.TB, root string, bins ...string) {
	t.Helper()
	files := map[string]bool{}
	for _, b := range bins {
		files[b] = true
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", b, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
	for f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkCreateExecClose(b *testing.B) {
	r := requireDocker(b)
	ctx := context.Background()
	for b.Loop() {
		sb, err := r.Create(ctx, sandbox.Config{Workdir: "/workspace"})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
		sb.Close(ctx)
	}
}

// BenchmarkDockerRunRm is `docker run --rm IMAGE true` through the API
// (create, start, wait, remove) on the same host-system image and binds as
// the rung, for ratios against the rungs' BenchmarkCreateExecClose.
func BenchmarkDockerRunRm(b *testing.B) {
	r := requireDocker(b)
	ctx := context.Background()
	cli, err := r.Client()
	if err != nil {
		b.Fatal(err)
	}
	img, binds, err := hostSysImage(ctx, cli)
	if err != nil {
		b.Fatal(err)
	}
	hcfg := &container.HostConfig{NetworkMode: "none", AutoRemove: false}
	for _, d := range binds {
		hcfg.Binds = append(hcfg.Binds, d+":"+d+":ro")
	}
	for b.Loop() {
		c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"true"}}, hcfg, nil, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
		select {
		case w := <-waitC:
			if w.StatusCode != 0 {
				b.Fatalf("true exited %d", w.StatusCode)
			}
		case err := <-errC:
			b.Fatal(err)
		}
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFileSizeLimit(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{FileSizeMB: 1}})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 3000000 /dev/zero > big"}})
	if res.ExitCode == 0 || len(res.Denials) == 0 || res.Denials[0].Kind != "fsize" {
		t.Fatalf("got %+v, want an fsize denial", res)
	}
}

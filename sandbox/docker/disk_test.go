package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

func denialsOf(res sandbox.ExecResult, kind string) []sandbox.Denial {
	var out []sandbox.Denial
	for _, d := range res.Denials {
		if d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// disk_mb bounds everything the container writes, not each file: 8 files
// of 15 MB under disk_mb=64 land at most 64 MB, the rest fails, and the
// result carries a disk denial; /tmp counts against the same bound. Once
// the files are removed there is room again and no denial.
func TestDiskBound(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 64}})
	if got := strings.Join(sb.Report().Limits, " "); !strings.Contains(got, "disk=64MB") {
		t.Errorf("report limits %q lack disk=64MB", got)
	}
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c",
		`for i in 1 2 3 4 5 6 7 8; do head -c 15000000 /dev/zero > big$i; done 2>/dev/null; cat big* | wc -c`}})
	landed, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q stderr %q: %v", res.Stdout, res.Stderr, err)
	}
	t.Logf("%d bytes landed; denials %+v", landed, res.Denials)
	if landed > 64<<20 || landed < 32<<20 {
		t.Errorf("%d bytes landed under disk_mb=64 (want close to, and at most, 64 MiB)", landed)
	}
	if d := denialsOf(res, "disk"); len(d) == 0 {
		t.Errorf("no disk denial: %+v", res.Denials)
	} else if !strings.Contains(d[0].Detail, "disk_mb=64") {
		t.Errorf("disk denial %q does not name the bound", d[0].Detail)
	}

	res = run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `rm -f big* && head -c 30000000 /dev/zero > again && head -c 40000000 /dev/zero > /tmp/t; echo $?`}})
	if strings.TrimSpace(string(res.Stdout)) == "0" {
		t.Errorf("70 MB written to the workdir and /tmp under disk_mb=64: /tmp is not bounded")
	}
	if len(denialsOf(res, "disk")) == 0 {
		t.Errorf("filling the bound through /tmp: no disk denial: %+v", res.Denials)
	}
	res = run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `rm -f again /tmp/t && head -c 30000000 /dev/zero > again`}})
	if res.ExitCode != 0 || len(denialsOf(res, "disk")) != 0 {
		t.Errorf("30 MB after freeing the layer: exit %d, denials %+v, stderr %q", res.ExitCode, res.Denials, res.Stderr)
	}
}

// The bound counts what the container adds, not its image: a container
// of an image larger than disk_mb still writes.
func TestDiskBoundExcludesImage(t *testing.T) {
	root := miniRoot(t)
	writeBig(t, root+"/usr/share/big", 40<<20)
	sb := newSandbox(t, sandbox.Config{Root: root, Limits: sandbox.Limits{DiskMB: 16}})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `dd if=/dev/zero of=f bs=1M count=8 2>&1`}})
	if res.ExitCode != 0 || len(denialsOf(res, "disk")) != 0 {
		t.Fatalf("8 MB under disk_mb=16 with a 40 MB image: exit %d, denials %+v, output %q", res.ExitCode, res.Denials, res.Stdout)
	}
}

// A read-only root's writable workdir and /tmp are volumes, which the
// layer's quota does not cover: the rung refuses the pair rather than
// leave them unbounded.
func TestDiskBoundReadOnlyRootRefused(t *testing.T) {
	r := requireDocker(t)
	sb, err := r.Create(context.Background(), sandbox.Config{Workdir: "/w", ReadOnlyRoot: true, Limits: sandbox.Limits{DiskMB: 64}})
	if err == nil {
		sb.Close(context.Background())
		t.Fatal("disk_mb with read_only_root: created; want a clear refusal")
	}
	if !strings.Contains(err.Error(), "disk_mb") || !strings.Contains(err.Error(), "read_only_root") {
		t.Fatalf("error %q does not name disk_mb and read_only_root", err)
	}
}

func writeBig(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Empty files cost the layer's metadata, which the bound counts too:
// millions of them cannot get past it.
func TestDiskBoundCountsFiles(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{DiskMB: 4}})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", `
n = 0
try:
    for n in range(1000000):
        open("f%d" % n, "w").close()
except OSError as e:
    print(n, e.errno)
`}})
	var n, errno int
	if _, err := fmt.Sscan(string(res.Stdout), &n, &errno); err != nil || errno != int(unix.EDQUOT) && errno != int(unix.ENOSPC) {
		t.Fatalf("want creating files to stop with EDQUOT or ENOSPC; stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	t.Logf("%d empty files under disk_mb=4", n)
	if len(denialsOf(res, "disk")) == 0 {
		t.Errorf("no disk denial after %d files: %+v", n, res.Denials)
	}
}

// The keeper's stdout and stderr are the container's log, which the daemon
// keeps on the host outside the layer: a command writing 100 MB into them
// leaves at most a capped log.
func TestContainerLogCapped(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `head -c 50000000 /dev/zero > /proc/1/fd/1; head -c 50000000 /dev/zero > /proc/1/fd/2; echo done`}})
	if strings.TrimSpace(string(res.Stdout)) != "done" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	in, err := sb.cli.ContainerInspect(context.Background(), sb.id)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon on another machine keeps its logs there: judge that by its
	// root directory, not by the log file, which json-file's rotation
	// replaces and a loaded machine can catch between rename and create.
	info, err := sb.cli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(info.DockerRootDir); err != nil {
		testenv.Missing(t, "the daemon's root directory "+info.DockerRootDir, "the daemon does not run on this machine")
	}
	var st os.FileInfo
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, err = os.Stat(in.LogPath); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the container's log: %v", err)
	}
	if st.Size() > 2<<20 {
		t.Errorf("container log %s holds %d bytes after 100 MB written to the keeper's output", in.LogPath, st.Size())
	}
}

package bwrap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"evals.si/sandbox"
)

// The benchmarks compare create + exec `true` + close of a sandbox restored
// from a setup snapshot with a bare `bwrap --ro-bind / / true`, and restore
// cost for a small and a big image root (EVALSI_BENCH_BIG_MB, default 200).
// Read the ratio of ns/op; the target is ≤ 1.5× bare bwrap.

func benchRung(b *testing.B) *Rung {
	b.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap not on PATH")
	}
	r := New(Options{})
	if p := r.Probe(context.Background()); !p.Works {
		b.Skip(p.Reason)
	}
	return r
}

func cycle(b *testing.B, r *Rung, cfg sandbox.Config, dir string, i int) {
	cfg.StateDir = filepath.Join(dir, strconv.Itoa(i))
	sb, err := r.Create(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("true: %+v %v", res, err)
	}
	if err := sb.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(cfg.StateDir)
}

func BenchmarkCreateExecClose(b *testing.B) {
	r := benchRung(b)
	dir := b.TempDir()
	setup, err := r.Create(context.Background(), sandbox.Config{Workdir: "/workspace", StateDir: filepath.Join(dir, "setup")})
	if err != nil {
		b.Fatal(err)
	}
	if res, err := setup.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p deps && echo ok > deps/installed"}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("setup: %+v %v", res, err)
	}
	layer, err := setup.(sandbox.Snapshotter).Snapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	setup.Close(context.Background())
	cfg := sandbox.Config{Workdir: "/workspace", Layers: []sandbox.Layer{layer}}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cycle(b, r, cfg, dir, i)
	}
}

// BenchmarkCreateExecCloseDiskMB is BenchmarkCreateExecClose with disk_mb
// set: the writable state on a tmpfs of its own (a mount and an unmount).
func BenchmarkCreateExecCloseDiskMB(b *testing.B) {
	r := benchRung(b)
	if os.Geteuid() != 0 {
		b.Skip("disk_mb needs a root engine on bwrap")
	}
	dir := b.TempDir()
	cfg := sandbox.Config{Workdir: "/workspace", Limits: sandbox.Limits{DiskMB: 256}}
	for i := 0; b.Loop(); i++ {
		cycle(b, r, cfg, dir, i)
	}
}

// BenchmarkBareBwrap runs bwrap directly: "same-namespaces" creates the
// namespaces a sandbox gets (the fair baseline: namespace creation dominates
// on many kernels), "ro-bind-only" is `bwrap --ro-bind / / true`.
func BenchmarkBareBwrap(b *testing.B) {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap not on PATH")
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"same-namespaces", []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"}},
		{"ro-bind-only", []string{"--ro-bind", "/", "/", "true"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if out, err := exec.Command(bw, c.args...).CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}

// BenchmarkRestore creates, runs `true` in and closes a sandbox over image
// roots of different sizes; overlay makes the cost independent of size.
func BenchmarkRestore(b *testing.B) {
	r := benchRung(b)
	bigMB := 200
	if v := os.Getenv("EVALSI_BENCH_BIG_MB"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			bigMB = n
		}
	}
	for _, mb := range []int{10, bigMB} {
		root := makeRoot(b, mb, "/usr/bin/true")
		b.Run(fmt.Sprintf("root=%dMB", mb), func(b *testing.B) {
			dir := b.TempDir()
			cfg := sandbox.Config{Root: root, Workdir: "/workspace"}
			for i := 0; b.Loop(); i++ {
				cycle(b, r, cfg, dir, i)
			}
		})
	}
}

// makeRoot builds a minimal image root that can run the given host
// binaries (they and the libraries ldd names) padded with mb MB of 1 MB files.
func makeRoot(b testing.TB, mb int, bins ...string) string {
	b.Helper()
	root := b.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "data", "tmp", "proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}} {
		os.Symlink(l[1], filepath.Join(root, l[0]))
	}
	files := slices.Clone(bins)
	for _, bin := range bins {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			b.Skipf("ldd: %v", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files = append(files, f)
				}
			}
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			b.Fatal(err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			b.Fatal(err)
		}
		dst := filepath.Join(root, "usr", strings.TrimPrefix(strings.TrimPrefix(f, "/usr"), "/"))
		if !strings.HasPrefix(f, "/usr/") {
			dst = filepath.Join(root, "usr", strings.TrimPrefix(f, "/"))
			if strings.HasPrefix(f, "/lib64/") {
				dst = filepath.Join(root, "usr/lib64", filepath.Base(f))
			} else if strings.HasPrefix(f, "/lib/") {
				dst = filepath.Join(root, "usr/lib", strings.TrimPrefix(f, "/lib/"))
			}
		}
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	chunk := make([]byte, 1<<20)
	for i := range mb {
		chunk[0] = byte(i)
		if err := os.WriteFile(filepath.Join(root, "data", fmt.Sprintf("blob-%05d", i)), chunk, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// BenchmarkExec is one command in a running sandbox, next to a bare fork
// and exec of the same command from the engine: the target is ≤ 2×.
func BenchmarkExec(b *testing.B) {
	r := benchRung(b)
	for _, c := range []struct {
		name string
		cfg  sandbox.Config
	}{
		{"default", sandbox.Config{Workdir: "/workspace"}},
		{"limits", sandbox.Config{Workdir: "/workspace", Limits: sandbox.Limits{MemoryMB: 512, PidsMax: 256}}},
		{"cgroup-off", sandbox.Config{Workdir: "/workspace", Limits: sandbox.Limits{Cgroup: "off"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := c.cfg
			cfg.StateDir = filepath.Join(b.TempDir(), "sb")
			sb, err := r.Create(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close(context.Background())
			req := sandbox.ExecRequest{Argv: []string{"bash", "-c", "true"}}
			if _, err := sb.Exec(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				res, err := sb.Exec(context.Background(), req)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
	b.Run("bare-fork-exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

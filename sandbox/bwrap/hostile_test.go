package bwrap

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/benchimage"
	"evals.si/sandbox"
	"evals.si/sandbox/userns"
)

// needRootEngine skips where the engine is not root: then root inside maps
// to the engine's own uid, and these facts are about the multi-id map.
func needRootEngine(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root engine", "the engine is not root: sandboxes map only its own uid (see the isolation report)")
	}
}

// Root inside is an unprivileged id outside: global sysctls (the
// core_pattern attack: a pipe to a script the kernel runs as host root)
// and every other /proc/sys file refuse writes, the map is the multi-id
// one, the capabilities are Docker's set, and what Docker masks is masked.
func TestRootInsideIsNotHostRoot(t *testing.T) {
	needRootEngine(t)
	sb := create(t, sandbox.Config{})
	res := run(t, sb, `
echo '|/tmp/x' > /proc/sys/kernel/core_pattern && echo WROTE core_pattern
echo 1 > /proc/sys/vm/swappiness && echo WROTE swappiness
find /proc/sys -type f 2>/dev/null | while read f; do (cat "$f" > "$f") 2>/dev/null && echo "WROTE $f"; done
echo > /proc/sysrq-trigger 2>/dev/null && echo WROTE sysrq
true`)
	if strings.Contains(string(res.Stdout), "WROTE") {
		t.Errorf("a sysctl was writable from the sandbox:\n%s", res.Stdout)
	}
	// Root's range in /etc/subuid, else sandbox.SubordinateIDBase onwards.
	idmap, _, err := userns.ForEngine()
	if err != nil {
		t.Fatal(err)
	}
	base, _ := idmap.HostUID(0)
	count := 65536
	if got, want := strings.Fields(string(run(t, sb, "cat /proc/self/uid_map").Stdout)), []string{"0", fmt.Sprint(base), fmt.Sprint(count)}; !slices.Equal(got, want) {
		t.Errorf("uid_map inside = %q, want %q", got, want)
	}
	// Docker's default set, as a CapEff mask.
	if got := strings.TrimSpace(string(run(t, sb, "grep CapEff /proc/self/status").Stdout)); got != "CapEff:\t00000000a80425fb" {
		t.Errorf("capabilities inside: %q, want Docker's default set (00000000a80425fb)", got)
	}
	for _, p := range []string{"/proc/keys", "/proc/timer_list", "/proc/interrupts"} {
		if _, err := os.Stat(p); err == nil {
			if out := run(t, sb, "cat "+p); len(out.Stdout) != 0 {
				t.Errorf("%s is not masked: %q", p, out.Stdout)
			}
		}
	}
	if res := run(t, sb, "ls -A /proc/acpi; touch /proc/acpi/x && echo WROTE"); len(res.Stdout) != 0 {
		t.Errorf("/proc/acpi is not an empty read-only directory: %q", res.Stdout)
	}
	rep := sb.Report()
	if !slices.Equal(rep.UIDMap, []string{fmt.Sprintf("0-%d -> %d-%d", count-1, base, base+count-1)}) {
		t.Errorf("report uid_map = %q", rep.UIDMap)
	}
	if !slices.Equal(rep.Capabilities, slices.Sorted(slices.Values(sandbox.ContainerCapabilities))) {
		t.Errorf("report capabilities = %q", rep.Capabilities)
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "capabilities: none") {
			t.Errorf("report still says %q", n)
		}
	}
}

// debianRoot unpacks the local Debian image (scripts/build-local-image.sh).
func debianRoot(t *testing.T) string { return benchimage.Root(t, "../..") }

// A Dockerfile's usual setup works in an image root, as in docker build:
// image files are owned by root inside (idmapped), apt-get's drop to _apt
// (setgroups, setresgid, setresuid), useradd and chown to the new user, and
// pip install of a local wheel. Config.User then runs as that user, and a
// file WriteFile made is editable by it and by root.
func TestImageSetupLikeDocker(t *testing.T) {
	needRootEngine(t)
	root := debianRoot(t)
	sb := create(t, sandbox.Config{Root: root, Workdir: "/app"})
	steps := []string{
		`test "$(stat -c %u:%g /etc/passwd /usr/bin/python3 | sort -u)" = 0:0`,
		`python3 -c "import os; os.setgroups([65534]); os.setresgid(65534,65534,65534); os.setresuid(42,42,42); assert os.getuid() == 42"`,
		`useradd -m agent && touch /app/owned && chown agent:agent /app/owned && test "$(stat -c %U /app/owned)" = agent`,
		`chown -R agent /home/agent && su agent -c 'id -un' | grep -qx agent`,
	}
	for _, st := range steps {
		if res := run(t, sb, st); res.ExitCode != 0 {
			t.Errorf("setup step %q: exit %d: %s%s", st, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	if err := sb.WriteFile(t.Context(), "/tmp/evalsi_probe-1.0-py3-none-any.whl", wheel(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := run(t, sb, "pip install --no-index --no-deps /tmp/evalsi_probe-1.0-py3-none-any.whl && python3 -c 'import evalsi_probe; print(evalsi_probe.X)'"); res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "42\n") {
		t.Errorf("pip install of a local wheel: exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	layer, err := sb.(sandbox.Snapshotter).Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(layer.Dir) })

	// The agent, over the setup snapshot, as the user setup made.
	as := create(t, sandbox.Config{Root: root, Layers: []sandbox.Layer{layer}, Workdir: "/app", User: "agent"})
	if err := as.WriteFile(t.Context(), "/app/sub/tool.txt", []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := run(t, as, `id -un; echo v2 >> /app/sub/tool.txt && echo mine > /app/sub/new && cat /app/sub/tool.txt; echo x > /app/owned && echo owned-ok; stat -c %U /home/agent`); string(res.Stdout) != "agent\nv1\nv2\nowned-ok\nagent\n" {
		t.Errorf("as Config.User: %q %s", res.Stdout, res.Stderr)
	}
	if res := run(t, as, "echo 1 > /proc/sys/vm/swappiness || echo refused"); !strings.Contains(string(res.Stdout), "refused") {
		t.Errorf("Config.User wrote a sysctl: %q", res.Stdout)
	}
	rs := create(t, sandbox.Config{Root: root, Layers: []sandbox.Layer{layer}, Workdir: "/app"})
	if err := rs.WriteFile(t.Context(), "edit.txt", []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := run(t, rs, "echo b >> edit.txt && cat edit.txt && stat -c %U edit.txt"); string(res.Stdout) != "a\nb\nroot\n" {
		t.Errorf("root editing WriteFile's file: %q %s", res.Stdout, res.Stderr)
	}
}

// wheel builds a minimal pure-Python wheel.
func wheel(t *testing.T) []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	files := map[string]string{
		"evalsi_probe/__init__.py":                 "X = 42\n",
		"evalsi_probe-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: evalsi-probe\nVersion: 1.0\n",
		"evalsi_probe-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: evalsi-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"evalsi_probe-1.0.dist-info/top_level.txt": "evalsi_probe\n",
	}
	var record strings.Builder
	for _, name := range slices.Sorted(maps(files)) {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[name]))
		fmt.Fprintf(&record, "%s,,\n", name)
	}
	record.WriteString("evalsi_probe-1.0.dist-info/RECORD,,\n")
	w, _ := z.Create("evalsi_probe-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func maps(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// File operations resolve in the sandbox's own view and touch regular
// files only, returning promptly with a clear error otherwise.
func TestFileOpsStayInside(t *testing.T) {
	sb := create(t, sandbox.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// With no image, /etc/mtab is a host symlink to ../proc/self/mounts:
	// a kernel file, which file operations refuse (the exec server may
	// see more of /proc than the sandbox's commands), never the engine's
	// mount table.
	got, err := sb.ReadFile(ctx, "/etc/mtab")
	host, _ := os.ReadFile("/proc/self/mounts")
	if err == nil || !strings.Contains(err.Error(), "kernel file") || bytes.Equal(got, host) {
		t.Errorf("ReadFile /etc/mtab = %d bytes, %v; want a kernel-file refusal", len(got), err)
	}
	if _, err := sb.ReadFile(ctx, "/proc/1/environ"); err == nil {
		t.Errorf("ReadFile /proc/1/environ (the exec server's) succeeded")
	}

	// An absolute symlink the sandbox plants resolves in the sandbox.
	canary := "/tmp/evalsi-canary-" + fmt.Sprint(os.Getpid())
	os.WriteFile(canary, []byte("HOST"), 0o644)
	defer os.Remove(canary)
	run(t, sb, "echo inside > "+canary+"; ln -s "+canary+" link; ln -s /proc/1/environ env")
	if b, err := sb.ReadFile(ctx, "link"); err != nil || string(b) != "inside\n" {
		t.Errorf("ReadFile through an absolute symlink: %q, %v; want the sandbox's file", b, err)
	}
	if err := sb.WriteFile(ctx, "link", []byte("written\n"), 0o644); err != nil {
		t.Errorf("WriteFile through a symlink inside: %v", err)
	}
	if b, _ := os.ReadFile(canary); string(b) != "HOST" {
		t.Errorf("WriteFile through a sandbox symlink changed the host file: %q", b)
	}

	// Special files are refused at once, never opened for reading or writing.
	run(t, sb, "mkfifo fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' 2>/dev/null; true")
	for _, p := range []string{"fifo", "/dev/zero", "/dev/null", "sock"} {
		start := time.Now()
		_, rerr := sb.ReadFile(ctx, p)
		werr := sb.WriteFile(ctx, p, []byte("x"), 0o644)
		if p == "sock" && errors.Is(rerr, fs.ErrNotExist) {
			continue // no python3 to make one
		}
		for _, err := range []error{rerr, werr} {
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s: %v; want a prompt refusal", p, err)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %s", p, d)
		}
	}

	// Reads are capped.
	run(t, sb, fmt.Sprintf("truncate -s %d big", sandbox.MaxReadFile+1))
	if _, err := sb.ReadFile(ctx, "big"); err == nil || !strings.Contains(err.Error(), "big") || !strings.Contains(err.Error(), "64 MiB") {
		t.Errorf("ReadFile over the cap: %v; want an error naming the path and the cap", err)
	}
	if _, err := sb.ReadFile(ctx, "no/such"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "/"); err == nil {
		t.Errorf("ReadFile of a directory: no error")
	}
}

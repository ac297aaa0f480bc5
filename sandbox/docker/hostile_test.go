package docker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/sandboxtest"
)

// TestRootInsideIsUnprivilegedOutside: the rung runs only on a daemon that
// remaps root; the report's map is the container's, commands hold exactly
// Docker's default capabilities, a global sysctl cannot be written, and
// Docker's masked and read-only paths are so.
func TestRootInsideIsUnprivilegedOutside(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	rep := sb.Report()
	if len(rep.UIDMap) == 0 || strings.HasPrefix(rep.UIDMap[0], "0-65535 -> 0-") {
		t.Fatalf("report uid map %q: want root mapped to an unprivileged range", rep.UIDMap)
	}
	if !slices.Equal(rep.Capabilities, sandbox.ContainerCapabilities) {
		t.Errorf("report capabilities %q, want %q", rep.Capabilities, sandbox.ContainerCapabilities)
	}
	before, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `id -u; cat /proc/self/uid_map; grep CapEff /proc/self/status | cut -f2
echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern && echo WROTE-SYSCTL; true`}})
	if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(after) != string(before) {
		os.WriteFile("/proc/sys/kernel/core_pattern", before, 0o644)
		t.Fatalf("the sandbox changed kernel.core_pattern to %q", after)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != 3 || lines[0] != "0" || strings.Contains(string(res.Stdout), "WROTE") {
		t.Fatalf("want uid 0, one uid_map line, CapEff and no sysctl write; got %q (stderr %q)", res.Stdout, res.Stderr)
	}
	f := strings.Fields(lines[1])
	if len(f) != 3 || f[1] == "0" {
		t.Fatalf("uid_map %q: root maps to host root", lines[1])
	}
	if n, _ := strconv.Atoi(f[2]); rep.UIDMap[0] != fmt.Sprintf("0-%d -> %s-%d", n-1, f[1], mustAtoi(t, f[1])+n-1) {
		t.Errorf("report uid map %q, container's uid_map %q", rep.UIDMap, lines[1])
	}
	if got := sandboxtest.CapNames(t, lines[2]); !slices.Equal(got, sandbox.ContainerCapabilities) {
		t.Errorf("CapEff inside %q, want %q", got, sandbox.ContainerCapabilities)
	}
	var script strings.Builder
	for _, p := range sandbox.MaskedPaths {
		fmt.Fprintf(&script, `if [ -d %[1]s ]; then echo "%[1]s $(ls -A %[1]s | wc -l)"; elif [ -e %[1]s ]; then echo "%[1]s $(head -c 100 %[1]s | wc -c)"; fi;`, p)
	}
	for _, p := range sandbox.ReadOnlyPaths {
		fmt.Fprintf(&script, `if [ -d %[1]s ]; then touch %[1]s/x 2>/dev/null && echo "%[1]s WRITABLE"; elif [ -e %[1]s ]; then (: > %[1]s) 2>/dev/null && echo "%[1]s WRITABLE"; fi;`, p)
	}
	masked := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", script.String() + "true"}})
	for _, l := range strings.Split(strings.TrimSpace(string(masked.Stdout)), "\n") {
		if l != "" && !strings.HasSuffix(l, " 0") {
			t.Errorf("not masked or not read-only: %s", l)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRemapRange(t *testing.T) {
	subuid := filepath.Join(t.TempDir(), "subuid")
	os.WriteFile(subuid, []byte("someone:200000:65536\ndockremap:100000:65536\n"), 0o644)
	for _, tc := range []struct{ root, want string }{
		{"/var/lib/docker/100000.100000", "0-65535 -> 100000-165535"},
		{"/var/lib/docker/300000.300000", "0 -> 300000 (docker userns-remap; the range's size is not in " + subuid + " here)"},
		{"/var/lib/docker", "docker userns-remap: root inside is an unprivileged uid outside (the daemon's remap range; not readable here)"},
	} {
		if got := remapRange(tc.root, subuid); len(got) != 1 || got[0] != tc.want {
			t.Errorf("remapRange(%q) = %q, want %q", tc.root, got, tc.want)
		}
	}
}

// TestCapabilitiesWorkAndKeeperSurvives: root holds Docker's default
// capabilities (chown, setuid work) yet cannot stop the container: not by
// kill -9 -1, by killing pid 1, or by becoming the keeper's uid first.
func TestCapabilitiesWorkAndKeeperSurvives(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `touch f && chown 1000:1000 f && stat -c %u:%g f && setpriv --reuid 1000 --regid 1000 --clear-groups id -u`}})
	if res.ExitCode != 0 || string(res.Stdout) != "1000:1000\n1000\n" {
		t.Fatalf("chown and setuid: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, attack := range []string{"kill -9 -1", "kill -9 1; kill -TERM 1; kill -HUP 1", "setpriv --reuid 65533 --regid 65533 --clear-groups kill -9 -1"} {
		run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", attack + "; sleep 0.5"}})
		if after := run(t, sb, sandbox.ExecRequest{Argv: []string{"true"}}); after.ExitCode != 0 {
			t.Fatalf("after %q: %+v", attack, after)
		}
	}
}

// TestAllowNetworkReachesNotTheHost: allow with an egress proxy (what the
// engine gives) goes through it, and without one keeps Docker's bridge;
// neither reaches a listener on the host's 127.0.0.1.
func TestAllowNetworkReachesNotTheHost(t *testing.T) {
	requireDocker(t)
	hostLn, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from upstream") })}
	go srv.Serve(hostLn)
	t.Cleanup(func() { srv.Close() })
	port := hostLn.Addr().(*net.TCPAddr).Port
	allowed := "upstream.test:" + strconv.Itoa(port)
	proxy := sandboxtest.StartProxy(t, map[string]string{allowed: hostLn.Addr().String()})
	direct := fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3); print('REACHED')"; `+
		`gw=$(ip route 2>/dev/null | awk '/default/ {print $3}'); [ -n "$gw" ] && python3 -c "import socket; socket.create_connection(('$gw', %d), 3); print('REACHED')"; true`, port, port)
	for _, tc := range []struct {
		name  string
		proxy string
	}{{"through the egress proxy", proxy.UnixAddr}, {"docker bridge", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, sandbox.Config{StateDir: t.TempDir(), Policy: sandbox.Policy{Network: sandbox.NetworkAllow, ProxyAddr: tc.proxy}})
			res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", direct}})
			if strings.Contains(string(res.Stdout), "REACHED") {
				t.Fatalf("a listener on the host's 127.0.0.1 was reached: %s %s", res.Stdout, res.Stderr)
			}
			if tc.proxy == "" {
				return
			}
			good := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", sandboxtest.ConnectScript + allowed}})
			if good.ExitCode != 0 || !strings.Contains(string(good.Stdout), "hello from upstream") {
				t.Fatalf("through the proxy: exit %d stdout %q stderr %q", good.ExitCode, good.Stdout, good.Stderr)
			}
			if rep := sb.Report(); rep.ProxyAddr != tc.proxy {
				t.Errorf("report proxy %q, want %q", rep.ProxyAddr, tc.proxy)
			}
		})
	}
}

// TestFileOperationsStayInside: a symlink to a host path resolves in the
// container, FIFOs are refused promptly, reads are capped, and written
// files are root's inside and editable there.
func TestFileOperationsStayInside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, not blocks the run
	defer cancel()
	canary := filepath.Join(t.TempDir(), "canary")
	os.WriteFile(canary, []byte("HOST-CANARY"), 0o644)
	for _, tc := range []struct {
		name string
		cfg  sandbox.Config
	}{{"no image", sandbox.Config{}}, {"image", sandbox.Config{Root: miniRoot(t)}}} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.cfg)
			res := run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf(`ln -s %s /workspace/link; mkfifo /workspace/fifo /tmp/fifo; : > big; dd if=/dev/zero of=big bs=1 count=1 seek=%d 2>/dev/null; ls`, canary, sandbox.MaxReadFile+10)}})
			if !strings.Contains(string(res.Stdout), "fifo") {
				t.Fatalf("could not make FIFOs in the image: %s %s", res.Stdout, res.Stderr)
			}
			if b, err := sb.ReadFile(ctx, "link"); err == nil || strings.Contains(string(b), "HOST-CANARY") {
				t.Errorf("ReadFile(link -> host %s) = %q, %v; want an error", canary, b, err)
			}
			for _, p := range []string{"fifo", "/tmp/fifo"} {
				if _, err := sb.ReadFile(ctx, p); err == nil || !strings.Contains(err.Error(), "FIFO") {
					t.Errorf("ReadFile(%s) = %v, want a refusal naming the FIFO", p, err)
				}
				if err := sb.WriteFile(ctx, p, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "FIFO") {
					t.Errorf("WriteFile(%s) = %v, want a refusal naming the FIFO", p, err)
				}
			}
			if _, err := sb.ReadFile(ctx, "big"); err == nil || !strings.Contains(err.Error(), "read cap") || !strings.Contains(err.Error(), "big") {
				t.Errorf("ReadFile(big) = %v, want the read cap named with the path", err)
			}
			for _, p := range []string{"new/w.txt", "/opt/e/w.txt"} {
				if err := sb.WriteFile(ctx, p, []byte("v1\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			res = run(t, sb, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `for f in /workspace/new/w.txt /opt/e/w.txt; do ls -ln $f | while read m l u g rest; do echo $m $u:$g; done; echo v2 >> $f; done`}})
			if want := "-rw------- 0:0\n-rw------- 0:0\n"; string(res.Stdout) != want || res.ExitCode != 0 {
				t.Errorf("written files inside: exit %d %q (stderr %q), want %q", res.ExitCode, res.Stdout, res.Stderr, want)
			}
			if b, err := sb.ReadFile(ctx, "/opt/e/w.txt"); err != nil || string(b) != "v1\nv2\n" {
				t.Errorf("ReadFile after edit = %q, %v", b, err)
			}
			if ctx.Err() != nil {
				t.Fatal("file operations hung")
			}
		})
	}
	t.Run("etc/mtab", func(t *testing.T) {
		sb := newSandbox(t, sandbox.Config{})
		b, _ := sb.ReadFile(ctx, "/etc/mtab")
		if engine, _ := os.ReadFile("/proc/self/mounts"); len(b) > 0 && string(b) == string(engine) {
			t.Fatalf("/etc/mtab is the engine's mount table")
		}
	})
}

// TestForkBombIsADenial: forks the pids limit refuses come back as a
// "pids" denial (read from the container's pids.events).
func TestForkBombIsADenial(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{Limits: sandbox.Limits{PidsMax: 32}})
	if sb.pidsEvents == "" {
		testenv.Missing(t, "pids.events", "the container's pids.events is not readable here (the daemon is not on this machine?)")
	}
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "for i in $(seq 60); do sleep 5 & done; wait"}, Timeout: 30 * time.Second})
	for _, d := range res.Denials {
		if d.Kind == "pids" {
			return
		}
	}
	t.Fatalf("no pids denial: %+v", res)
}

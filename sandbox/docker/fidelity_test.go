package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// userRoot is miniRoot with id, getent and hostname, a passwd and group
// file naming root and agent (1000, also in group extra), an /etc/hosts
// and /etc/hostname of the image's own, and a non-executable file.
func userRoot(t *testing.T) string {
	t.Helper()
	root := miniRoot(t)
	copyBinaries(t, root, "/usr/bin/id", "/usr/bin/getent", "/usr/bin/hostname", "/usr/bin/touch")
	for name, body := range map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
		"etc/group":    "root:x:0:\nagent:x:1000:\nextra:x:2000:agent\n",
		"etc/hosts":    "10.9.9.9\timagehost\n",
		"etc/hostname": "imagehost\n",
		"noexec":       "#!/bin/sh\necho ran\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// A request's user runs the command, as docker exec -u would: groups and
// HOME from the image's files, a config's HOME winning. A user Docker
// cannot run as is an error and nothing runs; a command Docker cannot
// start (missing, not executable) or one exiting 126 itself is a result.
func TestExecUserDocker(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, sandbox.Config{Root: userRoot(t), Workdir: "/workspace"})
	for _, tc := range []struct{ user, want string }{
		{"", "0 0 /root"},
		{"agent", "1000 1000 2000 /home/agent"},
		{"4242", "4242 0 /"},
	} {
		res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo $(id -u) $(id -G) $HOME`}, User: tc.user})
		if got := strings.TrimSpace(string(res.Stdout)); res.ExitCode != 0 || got != tc.want {
			t.Errorf("user %q: exit %d, %q (stderr %q); want %q", tc.user, res.ExitCode, got, res.Stderr, tc.want)
		}
	}
	res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo $HOME`}, User: "agent", Env: map[string]string{"HOME": "/elsewhere"}})
	if got := strings.TrimSpace(string(res.Stdout)); got != "/elsewhere" {
		t.Errorf("request HOME: %q, want /elsewhere", got)
	}

	for _, user := range []string{"nosuch", "agent:nosuch", "70000", "-1"} {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"touch", "/tmp/ran-" + user}, User: user})
		if err == nil {
			t.Errorf("user %q: Exec ran, want an error", user)
		} else if !strings.Contains(err.Error(), user) {
			t.Errorf("user %q: error %q does not name the user", user, err)
		}
		if _, err := sb.ReadFile(ctx, "/tmp/ran-"+user); err == nil {
			t.Errorf("user %q: the command ran", user)
		}
	}
	if _, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "100"}, User: "nosuch"}); err == nil || !strings.Contains(err.Error(), "unable to find user nosuch") {
		t.Errorf("service as an unknown user: %v, want Docker's error", err)
	}

	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"evalsi-no-such-command"}, 126},
		{[]string{"/noexec"}, 126},
		{[]string{"sh", "-c", "exit 126"}, 126},
	} {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: tc.argv, User: "agent"})
		if err != nil || res.ExitCode != tc.code {
			t.Errorf("%q as agent: exit %d, %v; want exit %d and no error", tc.argv, res.ExitCode, err, tc.code)
		}
	}
}

// The service's leader and its descendants are spared by the sweep after
// a command; what the command left is not, whether in a session of its own
// (setsid) or with a /proc/PID/stat that a newline in its name makes look
// like a child of the leader's. The leader is a child subreaper (kept
// across the helper's execve on this kernel); a command is none. Once the
// service's leader is not the process it was (its pid taken by another),
// its descendants are spared no more.
func TestServiceTreeSweep(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3", "the forged process name is set by a python3 script")
	}
	ctx := context.Background()
	sb := newSandbox(t, sandbox.Config{})
	const subreaper = "import ctypes; v = ctypes.c_int(-1); ctypes.CDLL(None).prctl(37, ctypes.byref(v), 0, 0, 0); print(v.value, flush=True)"
	svc, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", subreaper + "; import os; os.execvp('sh', ['sh', '-c', 'sleep 1001 & echo up; wait'])"}})
	if err != nil {
		t.Fatal(err)
	}
	leader := sb.services[0].pid
	forge := fmt.Sprintf(`import ctypes, time; ctypes.CDLL(None).prctl(15, b"x) S %d\n", 0, 0, 0); time.sleep(2003)`, leader)
	run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `sleep 2001 & setsid sleep 2002 & python3 -c "$0" & sleep 0.5`, forge}})

	procs := func() string {
		res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`}})
		return string(res.Stdout)
	}
	left := procs()
	for _, gone := range []string{"sleep 2001", "sleep 2002", "time.sleep(2003)"} {
		if strings.Contains(left, gone) {
			t.Errorf("%q survived its command: %q", gone, left)
		}
	}
	if !strings.Contains(left, "sleep 1001") {
		t.Fatalf("the service's child was killed: %q", left)
	}
	if _, exited := svc.Exited(); exited {
		t.Fatalf("the service exited: output %q", svc.Output())
	}
	if out := string(svc.Output()); !strings.HasPrefix(out, "1\n") {
		t.Errorf("the service's PR_GET_CHILD_SUBREAPER: output %q, want it to start with 1", out)
	}
	if got := strings.TrimSpace(string(run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", subreaper}}).Stdout)); got != "0" {
		t.Errorf("a command's PR_GET_CHILD_SUBREAPER: %q, want 0", got)
	}

	// As if the leader had died and its pid gone to a command's process.
	sb.services[0].start = "1"
	run(t, sb, sandbox.ExecRequest{Argv: []string{"true"}})
	if left := procs(); strings.Contains(left, "sleep 1001") {
		t.Errorf("the descendants of a process that is not the service's leader were spared: %q", left)
	}
}

// Docker's /etc/hosts, /etc/hostname and /etc/resolv.conf are there in
// every network mode, over an image's own: localhost and the hostname
// resolve, the hostname to loopback where there is nothing else.
func TestEtcFilesDocker(t *testing.T) {
	root := userRoot(t)
	for _, tc := range []struct {
		name string
		cfg  sandbox.Config
	}{
		{"deny", sandbox.Config{Root: root}},
		{"deny read-only root", sandbox.Config{Root: root, ReadOnlyRoot: true}},
		{"allow bridge", sandbox.Config{Root: root, Policy: sandbox.Policy{Network: sandbox.NetworkAllow}}},
		{"no image", sandbox.Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.cfg)
			res := run(t, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `h=$(hostname); echo "$h"; cat /etc/hostname; getent hosts localhost >/dev/null && echo localhost-resolves; getent hosts "$h" >/dev/null && echo hostname-resolves; echo ---; cat /etc/hosts`}})
			if res.ExitCode != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			out := string(res.Stdout)
			lines := strings.Split(out, "\n")
			h := lines[0]
			if h != sb.hostname || lines[1] != h {
				t.Fatalf("hostname %q, /etc/hostname %q; want %q", h, lines[1], sb.hostname)
			}
			hosts := out[strings.Index(out, "---\n")+4:]
			if strings.Contains(out, "imagehost") {
				t.Errorf("the image's /etc/hosts or /etc/hostname is in use: %q", out)
			}
			if !strings.Contains(hosts, "127.0.0.1\tlocalhost\n") {
				t.Errorf("/etc/hosts %q lacks localhost", hosts)
			}
			if !strings.Contains(out, "\nlocalhost-resolves\n") || !strings.Contains(out, "\nhostname-resolves\n") {
				t.Errorf("localhost or %s does not resolve: %q", h, out)
			}
			local := strings.Contains(hosts, hostnameAddr+"\t"+h+"\n")
			if bridge := tc.cfg.Policy.Network == sandbox.NetworkAllow; local == bridge {
				t.Errorf("/etc/hosts %q: line %s %s present=%v; want it only without a network", hosts, hostnameAddr, h, local)
			}
		})
	}
}

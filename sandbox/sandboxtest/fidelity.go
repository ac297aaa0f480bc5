package sandboxtest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/sandbox"
)

// The subtests here check that a sandbox runs a task as Docker would: a
// command as another user of the sandbox (docker exec -u), a long-running
// service (the image's ENTRYPOINT/CMD), and /etc/hosts, /etc/hostname and
// /etc/resolv.conf as Docker writes them.

// The user the ExecUser subtest adds to the sandbox's /etc/passwd, with its
// primary group and a supplementary one; evuserx and its group are near
// misses a lookup must not take for evuser.
const (
	fidUser       = "evuser"
	fidUID        = 4242
	fidGID        = 4243
	fidExtraGroup = "evextra"
	fidExtraGID   = 4244
	fidHome       = "/home/evuser"
	// fidNoEntryUID has no passwd entry: docker runs it with gid 0, HOME=/.
	fidNoEntryUID = 4300
)

const fidAddUser = `set -e
echo 'evuserx:x:4250:4250::/home/evuserx:/bin/sh' >> /etc/passwd
echo 'evuser:x:4242:4243:Eval User:/home/evuser:/bin/sh' >> /etc/passwd
echo 'evgroup:x:4243:' >> /etc/group
echo 'evextra:x:4244:someone,evuser' >> /etc/group
echo 'evnear:x:4245:evuserx,xevuser' >> /etc/group
mkdir -p /home/evuser && chown 4242:4243 /home/evuser
echo root-owned > rootfile && chmod 644 rootfile
`

// fidelity runs the subtests above; Conformance calls it.
func fidelity(t *testing.T, newRung func(t *testing.T) sandbox.Rung, o Options) {
	t.Run("ExecUser", func(t *testing.T) {
		o.gap(t, CapExecUser)
		sb := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) {
			if o.Users != nil {
				o.Users(t, c)
			}
		}))
		if res := sh(t, sb, fidAddUser); res.ExitCode != 0 {
			t.Fatalf("adding a user to /etc/passwd and /etc/group as root inside (as a Dockerfile's useradd would): exit %d, stderr %s; a rung whose /etc is not writable here sets Options.Users", res.ExitCode, short(res.Stderr))
		}
		idScript := `echo "$(id -u) $(id -g)"; id -G; echo "$HOME"`
		for _, tc := range []struct {
			user     string
			uid, gid int
			groups   []int // id -G: the gid, then the supplementary groups
			home     string
		}{
			{fidUser, fidUID, fidGID, []int{fidGID, fidExtraGID}, fidHome},
			{strconv.Itoa(fidUID), fidUID, fidGID, []int{fidGID, fidExtraGID}, fidHome},
			// An explicit group replaces the primary group and, as in
			// docker, drops the supplementary ones.
			{fidUser + ":" + fidExtraGroup, fidUID, fidExtraGID, []int{fidExtraGID}, fidHome},
			{fidUser + ":4299", fidUID, 4299, []int{4299}, fidHome},
			{strconv.Itoa(fidNoEntryUID), fidNoEntryUID, 0, []int{0}, "/"},
			{fmt.Sprintf("%d:%d", fidNoEntryUID, 4301), fidNoEntryUID, 4301, []int{4301}, "/"},
			{fmt.Sprintf("%d:evgroup", fidNoEntryUID), fidNoEntryUID, fidGID, []int{fidGID}, "/"},
		} {
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", idScript}, User: tc.user})
			if err != nil {
				t.Errorf("user %q: %v", tc.user, err)
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
			if res.ExitCode != 0 || len(lines) != 3 {
				t.Errorf("user %q: exit %d stdout %q stderr %s", tc.user, res.ExitCode, res.Stdout, short(res.Stderr))
				continue
			}
			if want := fmt.Sprintf("%d %d", tc.uid, tc.gid); lines[0] != want {
				t.Errorf("user %q: uid gid %q, want %q", tc.user, lines[0], want)
			}
			if got := idList(lines[1]); !slices.Equal(got, tc.groups) {
				t.Errorf("user %q: id -G %v, want %v", tc.user, got, tc.groups)
			}
			if lines[2] != tc.home {
				t.Errorf("user %q: HOME %q, want %q (from passwd, as docker exec sets it)", tc.user, lines[2], tc.home)
			}
		}

		// The request's HOME wins over passwd's.
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo "$HOME"`}, User: fidUser, Env: map[string]string{"HOME": "/custom"}})
		if err != nil || trim(res.Stdout) != "/custom" {
			t.Errorf("user with Env HOME=/custom: HOME %q, %v", res.Stdout, err)
		}
		// The default stays root.
		if got := trim([]byte(mustSh(t, sb, "id -u"))); got != "0" {
			t.Errorf("a request without User runs as uid %s, want 0 (root, the config sets no user)", got)
		}

		// What the user may and may not write.
		res, err = sb.Exec(t.Context(), sandbox.ExecRequest{User: fidUser, Argv: []string{"sh", "-c",
			`if echo x >> rootfile; then echo rootfile=written; fi; if echo x > /etc/evalsi-user-probe; then echo etc=written; fi; echo ok > "$HOME/mine" && echo ok > /tmp/mine && echo writable`}})
		if err != nil {
			t.Fatal(err)
		}
		out := string(res.Stdout)
		if strings.Contains(out, "=written") || !strings.Contains(out, "writable") {
			t.Errorf("as %s: want root-owned rootfile and /etc unwritable, $HOME and /tmp writable; got %q, stderr %s", fidUser, out, short(res.Stderr))
		}
		if b, err := sb.ReadFile(t.Context(), "rootfile"); err != nil || string(b) != "root-owned\n" {
			t.Errorf("rootfile after the user's write: %q, %v", b, err)
		}
		if got := mustSh(t, sb, "stat -c %u:%g /tmp/mine "+fidHome+"/mine"); got != "4242:4243\n4242:4243\n" {
			t.Errorf("owner of the files the user made: %q, want 4242:4243 for both", got)
		}

		// A user the sandbox cannot run as is an error, never a command
		// run as someone else.
		for _, tc := range []struct{ user, want string }{
			{"nosuchuser", "unable to find user nosuchuser: no matching entries in passwd file"},
			{fidUser + ":nosuchgroup", "unable to find group nosuchgroup: no matching entries in group file"},
			{"evuse", "unable to find user evuse"},
		} {
			res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"id", "-u"}, User: tc.user})
			if err == nil {
				t.Errorf("user %q: ran (exit %d, uid %s), want an error", tc.user, res.ExitCode, trim(res.Stdout))
			} else if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("user %q: error %q, want it to say %q", tc.user, err, tc.want)
			}
		}

		if _, gap := o.Gaps[CapService]; !gap {
			svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{User: fidUser, Argv: []string{"sh", "-c", `echo "$(id -u) $HOME" > /tmp/svc-id; exec sleep 300`}})
			if err != nil {
				t.Fatalf("StartService as %s: %v", fidUser, err)
			}
			b := waitFile(t, sb, svc, "/tmp/svc-id")
			if got := trim(b); got != "4242 "+fidHome {
				t.Errorf("service as %s: uid and HOME %q, want \"4242 %s\"", fidUser, got, fidHome)
			}
			if _, err := sb.StartService(t.Context(), sandbox.ExecRequest{User: "nosuchuser", Argv: []string{"true"}}); err == nil {
				t.Errorf("StartService as an unknown user must be an error")
			}
		}
	})

	t.Run("Service", func(t *testing.T) {
		o.gap(t, CapService)
		needPython(t)
		sb := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) { c.Env = map[string]string{"SVC_CFG": "cfg"} }))
		ctx := t.Context()
		mustSh(t, sb, "mkdir -p svcdir")
		if err := sb.WriteFile(ctx, "svcdir/svc.py", []byte(serviceScript), 0o644); err != nil {
			t.Fatal(err)
		}
		svc, err := sb.StartService(ctx, sandbox.ExecRequest{
			Argv: []string{"python3", "svc.py"}, Workdir: "svcdir", Env: map[string]string{"SVC_REQ": "req"},
		})
		if err != nil {
			t.Fatalf("StartService: %v", err)
		}
		port := trim(waitFile(t, sb, svc, "svcdir/port"))
		get := func(path string) sandbox.ExecResult {
			return sh(t, sb, fmt.Sprintf(`python3 -c "import urllib.request; print(urllib.request.urlopen('http://localhost:%s%s', timeout=10).read().decode())"`, port, path))
		}
		if res := get("/"); res.ExitCode != 0 || trim(res.Stdout) != "hello cfg req" {
			t.Fatalf("service reached by localhost:%s: exit %d stdout %q stderr %s", port, res.ExitCode, res.Stdout, short(res.Stderr))
		}
		// Commands come and go, with their leftovers killed and one timed
		// out; the service lives on.
		sh(t, sb, "(sleep 30) & echo started")
		sh(t, sb, "sleep 30", withTimeout(500*time.Millisecond))
		mustSh(t, sb, "true")
		if code, exited := svc.Exited(); exited {
			t.Fatalf("the service exited (code %d) after other commands ran; output %q", code, svc.Output())
		}
		if res := get("/"); res.ExitCode != 0 || trim(res.Stdout) != "hello cfg req" {
			t.Fatalf("service after several commands: exit %d stdout %q stderr %s", res.ExitCode, res.Stdout, short(res.Stderr))
		}
		a := len(waitFile(t, sb, svc, "svcdir/ticks"))
		time.Sleep(300 * time.Millisecond)
		if b := len(waitFile(t, sb, svc, "svcdir/ticks")); b <= a {
			t.Errorf("the service's ticker stopped between commands: ticks %d then %d bytes", a, b)
		}

		get("/quit")
		code := waitExit(t, svc)
		if code != 7 {
			t.Errorf("service exit code %d, want 7", code)
		}
		out := string(svc.Output())
		if !strings.Contains(out, "service stdout line") || !strings.Contains(out, "service stderr line") {
			t.Errorf("service output %q lacks its stdout and stderr lines", out)
		}

		// Output keeps the tail, at most DefaultOutputLimit bytes.
		big, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "head -c 1500000 /dev/zero | tr '\\0' a; echo; echo END-MARK >&2"}})
		if err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, big); code != 0 {
			t.Errorf("chatty service exit %d", code)
		}
		if b := big.Output(); len(b) > sandbox.DefaultOutputLimit || !bytes.HasSuffix(b, []byte("END-MARK\n")) {
			t.Errorf("chatty service output: %d bytes ending %q; want at most %d ending END-MARK", len(b), b[max(0, len(b)-20):], sandbox.DefaultOutputLimit)
		}

		// A service that daemonizes a child the usual way (double fork
		// and setsid, as `service nginx start` or `redis-server
		// --daemonize yes` in an entrypoint do) keeps it while it runs, as
		// a container does, through later commands, and loses it with the
		// sandbox. A command doing the same still loses its daemon when it
		// ends. The daemon appends to FILE every 50 ms, TICKS times (so a
		// failing rung cannot leave it running for ever); its argv carries
		// TOKEN, for finding it among the host's processes.
		const daemonize = `import os, sys, time
path, mode, ticks = sys.argv[1], sys.argv[2], int(sys.argv[3])
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open(os.devnull, os.O_RDWR)
        for i in range(3):
            os.dup2(fd, i)
        for _ in range(ticks):
            with open(path, "a") as f:
                f.write("t")
            time.sleep(0.05)
    os._exit(0)
os.waitpid(pid, 0)
if mode == "service":
    time.sleep(600)
`
		token := fmt.Sprintf("evalsi-daemon-%d-%d", os.Getpid(), time.Now().UnixNano())
		grows := func(file string) bool {
			a, _ := sb.ReadFile(ctx, file)
			time.Sleep(600 * time.Millisecond)
			b, _ := sb.ReadFile(ctx, file)
			return len(b) > len(a)
		}
		dsvc, err := sb.StartService(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", daemonize, "svc-daemon", "service", "1200", token}})
		if err != nil {
			t.Fatalf("StartService of a daemonizing service: %v", err)
		}
		waitFile(t, sb, dsvc, "svc-daemon")
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", daemonize, "cmd-daemon", "command", "200", token}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("a command that daemonizes a child: exit %d, %v, stderr %s", res.ExitCode, err, short(res.Stderr))
		}
		if grows("cmd-daemon") {
			t.Errorf("a command's double-forked setsid daemon outlived the command (a service was running)")
		}
		mustSh(t, sb, "(sleep 30) & echo second command")
		if !grows("svc-daemon") {
			t.Errorf("the service's double-forked setsid daemon stopped after two later commands; service output %q", dsvc.Output())
		}
		if code, exited := dsvc.Exited(); exited {
			t.Fatalf("the daemonizing service exited (code %d): %q", code, dsvc.Output())
		}
		// Where the host sees the sandbox's processes, none with the
		// token is left once it is closed.
		onHost := func() []string {
			var found []string
			dirs, _ := os.ReadDir("/proc")
			for _, d := range dirs {
				if b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(token)) {
					found = append(found, d.Name())
				}
			}
			return found
		}
		seen := len(onHost()) > 0
		if err := sb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitExit(t, dsvc)
		if !seen {
			t.Logf("the sandbox's processes are not visible in this host's /proc: not checking that the daemon ended with it")
			return
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			left := onHost()
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the service's daemon outlived the closed sandbox: host pids %v", left)
				break
			}
		}
	})

	t.Run("ServiceEndsWithSandbox", func(t *testing.T) {
		o.gap(t, CapService)
		sb := create(t, newRung(t), newConfig(t, o, nil))
		svc, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo up > svc-up; exec sleep 600"}})
		if err != nil {
			t.Fatal(err)
		}
		waitFile(t, sb, svc, "svc-up")
		if _, exited := svc.Exited(); exited {
			t.Fatalf("service exited early: %q", svc.Output())
		}
		if err := sb.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitExit(t, svc)
		if _, err := sb.StartService(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}}); err == nil {
			t.Errorf("StartService after Close must fail")
		}
	})

	t.Run("EtcFiles", func(t *testing.T) {
		o.gap(t, CapEtcFiles)
		needPython(t)
		sb := create(t, newRung(t), newConfig(t, o, nil))
		name := checkEtcFiles(t, sb)

		// Root inside may edit them, as in a container.
		mustSh(t, sb, "echo '192.0.2.9\textra.test' >> /etc/hosts && getent hosts extra.test")

		other := create(t, newRung(t), newConfig(t, o, nil))
		if name2 := checkEtcFiles(t, other); name2 == name {
			t.Errorf("two sandboxes share the hostname %s", name)
		}

		// They belong to the sandbox, not to a snapshot of it.
		snap, ok := sb.(sandbox.Snapshotter)
		if !ok {
			return
		}
		layer, err := snap.Snapshot(t.Context())
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		restored := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) { c.Layers = []sandbox.Layer{layer} }))
		if name3 := checkEtcFiles(t, restored); name3 == name {
			t.Errorf("a sandbox restored from a snapshot has the snapshotted sandbox's hostname %s", name)
		}
		if res := sh(t, restored, "grep extra.test /etc/hosts"); res.ExitCode == 0 {
			t.Errorf("a change to /etc/hosts was kept in the snapshot: %q", res.Stdout)
		}
	})
}

// checkEtcFiles checks /etc/hostname, /etc/hosts and /etc/resolv.conf
// against what Docker writes, and that localhost and the hostname resolve;
// it returns the hostname.
func checkEtcFiles(t *testing.T, sb sandbox.Sandbox) string {
	t.Helper()
	ctx := t.Context()
	b, err := sb.ReadFile(ctx, "/etc/hostname")
	if err != nil {
		t.Fatalf("reading /etc/hostname: %v", err)
	}
	name := strings.TrimSuffix(string(b), "\n")
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(name) || !strings.HasSuffix(string(b), "\n") {
		t.Errorf("/etc/hostname %q, want 12 hex digits and a newline (docker: the container id's first 12)", b)
	}
	if got := trim([]byte(mustSh(t, sb, "hostname"))); got != name {
		t.Errorf("hostname (UTS) %q, /etc/hostname %q", got, name)
	}

	hosts, err := sb.ReadFile(ctx, "/etc/hosts")
	if err != nil {
		t.Fatalf("reading /etc/hosts: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(hosts)), "\n")
	if !slices.Contains(lines, "127.0.0.1\tlocalhost") {
		t.Errorf("/etc/hosts lacks \"127.0.0.1\\tlocalhost\":\n%s", hosts)
	}
	// Docker writes its IPv6 lines all or none (none without IPv6).
	ip6 := []string{"::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "ff00::0\tip6-mcastprefix", "ff02::1\tip6-allnodes", "ff02::2\tip6-allrouters"}
	n := 0
	for _, l := range ip6 {
		if slices.Contains(lines, l) {
			n++
		}
	}
	if n != 0 && n != len(ip6) {
		t.Errorf("/etc/hosts has %d of docker's %d IPv6 lines:\n%s", n, len(ip6), hosts)
	}
	own := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] != "" && slices.Contains(f[1:], name) {
			own = true
		}
	}
	if !own {
		t.Errorf("/etc/hosts has no line for the hostname %s:\n%s", name, hosts)
	}

	resolv, err := sb.ReadFile(ctx, "/etc/resolv.conf")
	if err != nil {
		t.Fatalf("reading /etc/resolv.conf: %v", err)
	}
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	// Docker's versions differ in where the fallback goes: compare
	// nameservers, search and options lines each in their order.
	if got, want := byKind(resolvLines(resolv)), byKind(DockerResolvConf(host)); !slices.Equal(got, want) {
		t.Errorf("/etc/resolv.conf lines %q, want %q (the host's %q, loopback nameservers dropped, docker's fallback if none remain)", got, want, host)
	}

	for _, script := range []string{
		"getent hosts localhost",
		`python3 -c "import socket; assert socket.gethostbyname('localhost') == '127.0.0.1'"`,
		`getent hosts "$(hostname)"`,
		`python3 -c "import socket; socket.gethostbyname(socket.gethostname())"`,
	} {
		if res := sh(t, sb, script); res.ExitCode != 0 {
			t.Errorf("%s: exit %d, stderr %s", script, res.ExitCode, short(res.Stderr))
		}
	}
	return name
}

// DockerResolvConf is the resolv.conf Docker gives a container on its
// default network, from the host's: the nameserver, search and options
// lines, with loopback nameservers (unreachable from a container) dropped
// and, when none remain, Google's two as the fallback. Comments and blank
// lines are left out (Docker adds comments of its own).
func DockerResolvConf(host []byte) []string {
	var out []string
	ns := 0
	for _, l := range resolvLines(host) {
		f := strings.Fields(l)
		if f[0] == "nameserver" {
			if len(f) < 2 || strings.HasPrefix(f[1], "127.") || f[1] == "::1" {
				continue
			}
			ns++
		}
		out = append(out, l)
	}
	if ns == 0 {
		out = append([]string{"nameserver 8.8.8.8", "nameserver 8.8.4.4"}, out...)
	}
	return out
}

// byKind orders resolv.conf lines by keyword, keeping each keyword's order.
func byKind(lines []string) []string {
	out := slices.Clone(lines)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Compare(strings.Fields(a)[0], strings.Fields(b)[0])
	})
	return out
}

// resolvLines are a resolv.conf's nameserver, search and options lines,
// with their fields joined by single spaces.
func resolvLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "nameserver" || f[0] == "search" || f[0] == "options") {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// serviceScript serves "hello SVC_CFG SVC_REQ" on 127.0.0.1 (a free port,
// written to ./port once it listens), appends to ./ticks every 50 ms, and
// exits 7 after answering /quit.
const serviceScript = `import http.server, os, sys, threading, time

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello %s %s" % (os.environ.get("SVC_CFG"), os.environ.get("SVC_REQ"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        if self.path == "/quit":
            os._exit(7)
    def log_message(self, *a):
        pass

def tick():
    while True:
        with open("ticks", "a") as f:
            f.write("t")
        time.sleep(0.05)

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=tick, daemon=True).start()
print("service stdout line", flush=True)
print("service stderr line", file=sys.stderr, flush=True)
with open("port.tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename("port.tmp", "port")
srv.serve_forever()
`

// waitFile waits for the service to write file (relative to the workdir)
// and returns it; it fails if the service exits first.
func waitFile(t *testing.T, sb sandbox.Sandbox, svc sandbox.Service, file string) []byte {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := sb.ReadFile(t.Context(), file)
		if err == nil && len(b) > 0 {
			return b
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reading %s: %v", file, err)
		}
		if code, exited := svc.Exited(); exited {
			t.Fatalf("the service exited (code %d) before writing %s; output %q", code, file, svc.Output())
		}
	}
	t.Fatalf("the service did not write %s within a minute; output %q", file, svc.Output())
	return nil
}

// waitExit waits for the service to end and returns its exit code.
func waitExit(t *testing.T, svc sandbox.Service) int {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code, exited := svc.Exited(); exited {
			return code
		}
	}
	t.Fatalf("the service did not end within a minute; output %q", svc.Output())
	return 0
}

func idList(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

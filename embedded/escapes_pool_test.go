package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
	"evals.si/sandbox/landlock"
	"evals.si/store"
)

// The warm pool's promise, attacked through the engine: a trial's sandbox
// is taken from a pool of spares made ahead, and nothing one trial leaves
// (files anywhere it can write, a background process, /dev/shm, SysV IPC,
// an environment change, a listening socket) reaches a later trial, nor
// does any sandbox serve two trials. A "plant" record leaves all of it;
// every "look" record searches for all of it, then leaves traces of its
// own for the looks after it.

// poolLeftPrefix and poolLeftPort: the marker is poolLeftPrefix-NONCE; the
// scripts join it at run time, so no command line the search itself
// starts holds the joined marker before the search is over.
const (
	poolLeftPrefix = "evalsi-pool-left"
	poolLeftPort   = 47613
	// poolLeftSleep is the planted sleeps' duration: a sleep that lost the
	// marker from its argv (exec) is still found by it.
	poolLeftSleep = "313"
)

// poolListener holds a unix socket in /tmp, an abstract unix socket and a
// TCP port on the sandbox's loopback, each answering the tag.
const poolListener = `import select, socket, sys
t, port = sys.argv[1], int(sys.argv[2])
ls = []
for fam, addr in ((socket.AF_UNIX, '/tmp/' + t + '.sock'), (socket.AF_UNIX, '\0' + t), (socket.AF_INET, ('127.0.0.1', port))):
    try:
        s = socket.socket(fam)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(8)
        ls.append(s)
    except OSError:
        pass
open('/tmp/' + t + '.ready', 'w').write(str(len(ls)))
while ls:
    for s in select.select(ls, [], [])[0]:
        c = s.accept()[0]
        c.sendall(t.encode())
        c.close()
`

// poolPlant leaves everything it can, tagged $M-TAG, and says what took.
const poolPlant = `M=$(printf '%s-%s' @PREFIX@ @NONCE@); T="$M-@TAG@"
echo "SANDBOX $(uname -n)"
for d in "$PWD" /tmp /var/tmp /dev/shm "$HOME" /root /opt /srv /run /var/lib /var/cache /usr/local /etc /mnt /home /; do
  (echo "$T" > "$d/$T-file") 2>/dev/null && echo "PLANTED-FILE $d"
done
(echo "# $T" >> calc.py) 2>/dev/null && echo "PLANTED-EDIT calc.py"
for f in "$HOME/.bashrc" "$HOME/.profile" "$HOME/.bash_profile" "/etc/profile.d/$T.sh" /etc/environment /etc/bash.bashrc; do
  (echo "export EVALSI_POOL_LEFT=$T" >> "$f") 2>/dev/null && echo "PLANTED-ENV $f"
done
git config --global evalsi.left "$T" 2>/dev/null && echo "PLANTED-GITCONFIG"
ipcmk -M 4096 >/dev/null 2>&1 && echo "PLANTED-IPC shm"
ipcmk -Q >/dev/null 2>&1 && echo "PLANTED-IPC queue"
setsid sh -c 'sleep @SLEEP@; :' "$T-setsid" </dev/null >/dev/null 2>&1 &
nohup sh -c 'sleep @SLEEP@; :' "$T-nohup" </dev/null >/dev/null 2>&1 &
(sh -c 'sleep @SLEEP@; :' "$T-double" </dev/null >/dev/null 2>&1 &)
setsid sleep @SLEEP@ </dev/null >/dev/null 2>&1 &
PY=$(cat <<'EOF'
@LISTENER@
EOF
)
setsid python3 -c "$PY" "$T" @PORT@ </dev/null >/dev/null 2>&1 &
for i in $(seq 50); do [ -s "/tmp/$T.ready" ] && break; sleep 0.1; done
echo "PLANTED-SOCKETS $(cat "/tmp/$T.ready" 2>/dev/null)"
n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *"$T"*) n=$((n+1));; esac; done
echo "PLANTED-PROCS $n"
echo PLANTED`

// poolAlive runs as the plant's next command: which of its processes
// outlived the command that started them (logged, not required).
const poolAlive = `M=$(printf '%s-%s' @PREFIX@ @NONCE@)
n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *"$M"*) n=$((n+1));; esac; done
echo "ALIVE $n"`

// poolSearch looks for every kind of trace any trial leaves (any tag), and
// prints FOUND-… lines for what it finds; SEARCHED says it ran to the end.
const poolSearch = `M=$(printf '%s-%s' @PREFIX@ @NONCE@)
echo "SANDBOX $(uname -n)"
echo "HOME $HOME PWD $PWD"
for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *"$M"*|"sleep @SLEEP@ ") echo "FOUND-PROC ${p#/proc/}: $c";; esac; done
find / \( -path /proc -o -path /sys -o -path /usr -o -path /bin -o -path /sbin -o -path /lib -o -path /lib32 -o -path /lib64 -o -path /libx32 -o -path /dev \) -prune -o -name "*$M*" -print 2>/dev/null | sed 's/^/FOUND-NAME /'
find /dev/shm /usr/local -name "*$M*" 2>/dev/null | sed 's/^/FOUND-NAME /'
grep -rlaF "$M" "$PWD" /tmp /var/tmp /dev/shm "$HOME" /root /opt /srv /run /var /etc /mnt /home 2>/dev/null | sed 's/^/FOUND-CONTENT /'
for s in "env" "bash -lc env" "bash -ic env" "sh -lc env"; do $s </dev/null 2>/dev/null | grep -F "$M" | sed "s|^|FOUND-ENV ($s) |"; done
git config --global --get-regexp '^evalsi' 2>/dev/null | sed 's/^/FOUND-GITCONFIG /'
echo "IPC-OBJECTS $(ipcs -a 2>/dev/null | grep -c '^0x')"
python3 - "$M" @PORT@ <<'EOF'
import glob, socket, sys
m, port = sys.argv[1], int(sys.argv[2])
for line in open('/proc/net/unix').read().splitlines()[1:]:
    if m in line:
        print('FOUND-UNIX', line)
for p in glob.glob('/tmp/*' + m + '*.sock'):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(p)
        print('FOUND-SOCKET', p, s.recv(200).decode())
    except OSError as e:
        print('FOUND-SOCKET-FILE', p, e)
try:
    s = socket.create_connection(('127.0.0.1', port), 2)
    print('FOUND-TCP', port, s.recv(200).decode() or 'connected')
except OSError:
    pass
EOF
echo SEARCHED`

func poolScript(script, nonce, tag string) string {
	return strings.NewReplacer("@PREFIX@", poolLeftPrefix, "@NONCE@", nonce, "@TAG@", tag,
		"@PORT@", strconv.Itoa(poolLeftPort), "@SLEEP@", poolLeftSleep, "@LISTENER@", poolListener).Replace(script)
}

func requireLandlock(t *testing.T) {
	t.Helper()
	if _, err := landlock.ABI(); err != nil {
		testenv.Missing(t, "landlock", err.Error())
	}
}

func TestEscapePoolLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the suite attacks the rungs as they run under a root engine, the default here")
	}
	nonce := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	marker := poolLeftPrefix + "-" + nonce
	for _, r := range []struct {
		name string
		need func(t *testing.T)
	}{{sandbox.RungBwrap, requireAgentSandbox}, {sandbox.RungLandlock, requireLandlock}} {
		t.Run(r.name, func(t *testing.T) {
			r.need(t)
			// Every sandbox name seen on this rung, across both runs, with
			// the trial that saw it.
			seen := map[string]string{}
			for _, run := range []struct{ concurrency, looks int }{{1, 6}, {4, 12}} {
				t.Run(fmt.Sprintf("concurrency-%d", run.concurrency), func(t *testing.T) {
					poolLeftoverRun(t, r.name, nonce, marker, run.concurrency, run.looks, seen)
				})
			}
		})
	}
}

// poolLeftoverRun runs one spec: a plant record, then looks records, at
// concurrency, all in one environment (one pool key), and checks every look
// found nothing, every trial had a sandbox of its own, the pool served
// takes, and nothing reached the host.
func poolLeftoverRun(t *testing.T, rung, nonce, marker string, concurrency, looks int, seen map[string]string) {
	tag := fmt.Sprintf("%s-c%d", rung, concurrency)
	ids := []string{tag + "-plant"}
	for i := range looks {
		ids = append(ids, fmt.Sprintf("%s-look-%02d", tag, i+1))
	}
	records := []map[string]any{}
	script := map[string]any{}
	step := func(n int, cmd string) map[string]any {
		return map[string]any{"content": fmt.Sprintf("step %d", n),
			"tool_calls": []map[string]any{{"name": "bash", "arguments": map[string]any{"command": cmd}}}}
	}
	for i, id := range ids {
		records = append(records, map[string]any{"id": id, "input": "pool leftovers: " + id})
		first, second := poolScript(poolSearch, nonce, id), poolScript(poolPlant, nonce, id)
		if i == 0 {
			first, second = poolScript(poolPlant, nonce, id), poolScript(poolAlive, nonce, id)
		}
		script[id] = []map[string]any{step(1, first), step(2, second), {"content": "done"}}
	}
	s := map[string]any{
		"name":        "pool-leftovers-" + tag,
		"concurrency": concurrency,
		"retries":     0,
		"dataset":     map[string]any{"records": records},
		"target":      map[string]any{"connector": "scripted", "model": "scripted-agent", "script": map[string]any{"records": script}},
		"harness":     map[string]any{"builtin": map[string]any{"max_steps": 4}},
		// One environment for every record, so every trial's sandbox has
		// one warm pool key. Network deny: allow and allowlist give each
		// trial an egress proxy of its own, whose address is in the key.
		"environment": map[string]any{
			"files": map[string]string{"calc.py": "def add(a, b):\n    return a - b\n"},
			"setup": []string{"git init -q && git add -A && git -c user.name=evalsi -c user.email=evalsi@localhost commit -qm init"},
			"env": map[string]string{"PYTHONDONTWRITEBYTECODE": "1",
				"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"},
			"sandbox":         map[string]any{"workdir": "/workspace", "network": "deny", "ladder": []string{rung}, "pids_max": 256},
			"command_timeout": "60s",
		},
	}
	b, err := json.Marshal(s) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	f := writeSpec(t, string(b))
	a := openApp(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	sum, err := a.Run(ctx, f, RunOptions{})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the run hung: still running after 3 minutes")
	}
	if err != nil {
		t.Fatalf("running the pool leftovers spec: %v", err)
	}
	elapsed := time.Since(start)
	stats := a.Planner().Envs.WarmStats()
	t.Logf("%d trials at concurrency %d in %v; warm pool takes: %d hits, %d misses", len(ids), concurrency, elapsed.Round(time.Millisecond), stats.Hits, stats.Misses)
	// Without hits no trial's sandbox came from the pool, and the run
	// would pass without testing it.
	if stats.Hits == 0 {
		t.Errorf("the warm pool served no take (%d misses): the run did not test the pool", stats.Misses)
	}

	views := trialViews(t, a, sum)
	trials := make([]store.Trial, 0, len(ids))
	for _, id := range ids {
		v, ok := views[id]
		if !ok {
			t.Fatalf("no trial for record %s", id)
		}
		if ok, why := v.finished(); !ok {
			t.Fatalf("record %s: %s", id, why)
		}
		if len(v.results) != 2 {
			t.Fatalf("record %s: %d tool results, want 2: %.500s", id, len(v.results), v.output())
		}
		trials = append(trials, v.trial)
	}
	checkPoolOrder(t, trials, concurrency)

	// The plant must have planted, or the looks would find nothing
	// without testing anything.
	plant := views[ids[0]]
	out := plant.results[0].Output
	t.Logf("plant %s: %s; next command: %s", ids[0], strings.Join(strings.Fields(grepLines(out, "PLANTED")), " "), strings.TrimSpace(plant.results[1].Output))
	var missing []string
	// /var/tmp and /dev/shm are read-only on some rungs (bwrap's /var is
	// the host's, read-only; landlock's /dev is a small read-only tmpfs),
	// which leaves nothing to find there; the search covers them anyway.
	for _, want := range []string{"PLANTED-FILE /workspace", "PLANTED-FILE /tmp",
		"PLANTED-EDIT calc.py", "PLANTED-ENV", "PLANTED-GITCONFIG", "PLANTED-SOCKETS 3", "PLANTED-IPC", "\nPLANTED\n"} {
		if !strings.Contains(out+"\n", want) {
			missing = append(missing, want)
		}
	}
	if n := countAfter(out, "PLANTED-PROCS "); n < 4 {
		missing = append(missing, fmt.Sprintf("PLANTED-PROCS ≥ 4 (got %d)", n))
	}
	if len(missing) > 0 {
		t.Fatalf("the plant did not plant %q, so the looks would test nothing: %.2000s", missing, out)
	}

	for i, id := range ids {
		v := views[id]
		first := v.results[0].Output
		name := sandboxName(first)
		if name == "" {
			t.Errorf("record %s printed no sandbox name: %.300s", id, first)
		} else if other, dup := seen[name]; dup {
			t.Errorf("records %s and %s ran in the same sandbox %q", other, id, name)
		} else {
			seen[name] = id
		}
		if i == 0 {
			continue
		}
		if !strings.Contains(first, "\nSEARCHED") {
			t.Errorf("record %s: the search did not run to its end: %.2000s", id, first)
			continue
		}
		var found []string
		for _, line := range strings.Split(first, "\n") {
			switch {
			case strings.HasPrefix(line, "FOUND-"), strings.Contains(line, marker):
				found = append(found, line)
			case strings.HasPrefix(line, "IPC-OBJECTS ") && strings.TrimSpace(strings.TrimPrefix(line, "IPC-OBJECTS ")) != "0":
				found = append(found, line+" (SysV IPC objects of another sandbox)")
			}
		}
		if len(found) > 0 {
			t.Errorf("LEFTOVER: record %s (sandbox %s) found what earlier trials left:\n  %s", id, name, strings.Join(found, "\n  "))
		}
		if !strings.Contains(v.results[1].Output, "\nPLANTED") {
			t.Errorf("record %s: its own traces were not planted: %.500s", id, v.results[1].Output)
		}
	}

	// Nothing reached the host either, once the app has closed every
	// sandbox (closes are asynchronous; Close waits for them).
	if err := a.Close(); err != nil { // idempotent: openApp's cleanup closes it again
		t.Errorf("closing the app: %v", err)
	}
	checkHostClean(t, marker)
}

// checkPoolOrder: the store's queue leases a run's pending attempts by
// their enqueue sequence, which is dataset order (store.Lease: ORDER BY
// seq), and a run's lease epochs grow with every lease. So the plant is
// leased first; at concurrency 1 the worker's only slot leases the next
// attempt after the last one finished, so each trial starts after the one
// before it ended.
func checkPoolOrder(t *testing.T, trials []store.Trial, concurrency int) {
	t.Helper()
	for i := 1; i < len(trials); i++ {
		prev, cur := trials[i-1], trials[i]
		if cur.LeaseEpoch <= prev.LeaseEpoch {
			t.Errorf("record %s was leased (epoch %d) before %s (epoch %d), against dataset order", cur.RecordID, cur.LeaseEpoch, prev.RecordID, prev.LeaseEpoch)
		}
		if concurrency == 1 && cur.StartedAt.Before(prev.FinishedAt) {
			t.Errorf("at concurrency 1, record %s started at %v, before %s finished at %v", cur.RecordID, cur.StartedAt, prev.RecordID, prev.FinishedAt)
		}
	}
}

// checkHostClean: no process with the marker runs on the host, no file
// with it is in the host's shared temporary directories or root's home,
// no unix socket of the host's network namespace has it, and nothing on
// the host's loopback answers with it.
func checkHostClean(t *testing.T, marker string) {
	t.Helper()
	var procs []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs = hostProcsWith(marker)
		if len(procs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(procs) > 0 {
		t.Errorf("LEFTOVER on the host: processes a trial started outlive the app's Close:\n  %s", strings.Join(procs, "\n  "))
	}
	home, _ := os.UserHomeDir()
	for _, d := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm", "/run", home} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.Contains(e.Name(), marker) {
				t.Errorf("LEFTOVER on the host: %s", filepath.Join(d, e.Name()))
			}
		}
	}
	if b, err := os.ReadFile("/proc/net/unix"); err == nil && bytes.Contains(b, []byte(marker)) {
		t.Errorf("LEFTOVER on the host: a unix socket in the host's network namespace: %s", grepLines(string(b), marker))
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(poolLeftPort)), time.Second); err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 200)
		n, _ := c.Read(b)
		c.Close()
		if strings.Contains(string(b[:n]), marker) {
			t.Errorf("LEFTOVER on the host: a trial's listener answers on the host's 127.0.0.1:%d: %q", poolLeftPort, b[:n])
		}
	}
}

func hostProcsWith(marker string) []string {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		out = append(out, filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	slices.Sort(out)
	return out
}

// sandboxName is the SANDBOX line's value: the sandbox's hostname, which
// both rungs make per sandbox.
func sandboxName(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SANDBOX "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func grepLines(out, substr string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, substr) {
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
	return b.String()
}

func countAfter(out, prefix string) int {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

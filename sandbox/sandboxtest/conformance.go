package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"evals.si/sandbox"
)

// Conformance runs the behaviour every rung must share. newRung is called
// once per subtest.
func Conformance(t *testing.T, newRung func(t *testing.T) sandbox.Rung, o Options) {
	t.Run("Exec", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		res := sh(t, sb, "echo out; echo err >&2; exit 3")
		if res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Errorf("exit %d stdout %q stderr %q; want 3, \"out\\n\", \"err\\n\"", res.ExitCode, res.Stdout, res.Stderr)
		}
		if res.TimedOut || res.Truncated || len(res.Denials) > 0 {
			t.Errorf("plain command reported timed_out=%v truncated=%v denials=%v", res.TimedOut, res.Truncated, res.Denials)
		}
		r2, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"printf", "[%s]", "a b", "c"}})
		if err != nil || string(r2.Stdout) != "[a b][c]" {
			t.Errorf("argv passed intact: got %q, %v; want [a b][c]", r2.Stdout, err)
		}
		r3, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"evalsi-no-such-command"}})
		if err != nil {
			t.Errorf("a missing command must be a result (non-zero exit), got error %v", err)
		} else if r3.ExitCode == 0 {
			t.Errorf("a missing command exited 0")
		}
		if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{}); err == nil {
			t.Errorf("empty argv must be an error")
		}
	})

	t.Run("Files", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		ctx := t.Context()
		wd := strings.TrimSpace(mustSh(t, sb, "pwd"))
		if err := sb.WriteFile(ctx, "sub/dir/in.txt", []byte("hello in\n"), 0o644); err != nil {
			t.Fatalf("WriteFile relative: %v", err)
		}
		if got := mustSh(t, sb, "cat sub/dir/in.txt && cat "+wd+"/sub/dir/in.txt"); got != "hello in\nhello in\n" {
			t.Errorf("file written relative, read in sandbox: %q", got)
		}
		if err := sb.WriteFile(ctx, wd+"/abs.txt", []byte("abs"), 0o644); err != nil {
			t.Fatalf("WriteFile absolute: %v", err)
		}
		if got := mustSh(t, sb, "cat abs.txt"); got != "abs" {
			t.Errorf("absolute WriteFile into workdir read as %q", got)
		}
		if err := sb.WriteFile(ctx, "run.sh", []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
			t.Fatalf("WriteFile script: %v", err)
		}
		if got := mustSh(t, sb, "./run.sh"); got != "ran\n" {
			t.Errorf("executable mode not kept: %q", got)
		}
		// Renames and links into another directory, as apt moves its
		// downloads out of partial/ (a Landlock domain that does not allow
		// reparenting makes these EXDEV).
		if got := mustSh(t, sb, "mkdir -p mv/a mv/b && echo x > mv/a/f && mv mv/a/f mv/b/f && ln mv/b/f mv/a/g && mkdir mv/a/d && mv mv/a/d mv/b/d && cat mv/b/f mv/a/g && ls mv/b"); got != "x\nx\nd\nf\n" {
			t.Errorf("rename and link across directories: %q", got)
		}
		mustSh(t, sb, "mkdir -p out && printf 'result %s' 42 > out/r.txt")
		for _, p := range []string{"out/r.txt", wd + "/out/r.txt"} {
			b, err := sb.ReadFile(ctx, p)
			if err != nil || string(b) != "result 42" {
				t.Errorf("ReadFile(%q) = %q, %v; want \"result 42\"", p, b, err)
			}
		}
		if _, err := sb.ReadFile(ctx, "no/such/file"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile of a missing file: %v; want an error wrapping fs.ErrNotExist", err)
		}
		// A symlink the sandbox plants must not make the engine read host files.
		canary := filepath.Join(t.TempDir(), "host-canary")
		os.WriteFile(canary, []byte("HOST-ONLY"), 0o644)
		mustSh(t, sb, "ln -s "+canary+" link")
		if b, err := sb.ReadFile(ctx, "link"); err == nil && string(b) == "HOST-ONLY" && o.Gaps[CapWorkdirPath] == "" {
			t.Errorf("ReadFile followed a sandbox symlink to a host file")
		}
	})

	t.Run("Workdir", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		got := strings.TrimSpace(mustSh(t, sb, "pwd && test -w ."))
		if _, gap := o.Gaps[CapWorkdirPath]; !gap && got != testWorkdir {
			t.Errorf("cwd %q; want the configured workdir %q (created)", got, testWorkdir)
		}
		mustSh(t, sb, "mkdir -p a/b")
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"pwd"}, Workdir: "a/b"})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != got+"/a/b" {
			t.Errorf("request workdir a/b: %q, %v; want %s/a/b", res.Stdout, err, got)
		}
	})

	t.Run("Env", func(t *testing.T) {
		t.Setenv("EVALSI_CONFORMANCE_ENGINE_ONLY", "engine-secret")
		sb := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) {
			c.Env = map[string]string{"A": "cfg-a", "B": "cfg-b"}
		}))
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
			Argv: []string{"sh", "-c", `echo "$A $B $C"; env`},
			Env:  map[string]string{"B": "req-b", "C": "req-c"},
		})
		if err != nil {
			t.Fatal(err)
		}
		first, rest, _ := strings.Cut(string(res.Stdout), "\n")
		if first != "cfg-a req-b req-c" {
			t.Errorf("env: got %q; want config env with request env winning: \"cfg-a req-b req-c\"", first)
		}
		if strings.Contains(rest, "engine-secret") {
			t.Errorf("the engine's environment leaked into the sandbox")
		}
		if !strings.Contains(rest, "PATH=") {
			t.Errorf("no default PATH in the sandbox env:\n%s", rest)
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "tr a-z A-Z"}, Stdin: []byte("hello stdin")})
		if err != nil || string(res.Stdout) != "HELLO STDIN" {
			t.Errorf("stdin: %q, %v", res.Stdout, err)
		}
		res, err = sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"cat"}})
		if err != nil || res.ExitCode != 0 || len(res.Stdout) != 0 {
			t.Errorf("no stdin must read as empty, not hang: %+v, %v", res, err)
		}
	})

	t.Run("OutputLimit", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		res, err := sb.Exec(t.Context(), sandbox.ExecRequest{
			Argv:        []string{"sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2"},
			OutputLimit: 1000,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Stdout) != 1000 || !res.Truncated || len(res.Stderr) != 10 {
			t.Errorf("stdout %d bytes truncated=%v stderr %d; want 1000, true, 10", len(res.Stdout), res.Truncated, len(res.Stderr))
		}
		if res.ExitCode != 0 {
			t.Errorf("a capped command must still run to completion, exit %d", res.ExitCode)
		}
	})

	t.Run("OutputStreams", func(t *testing.T) {
		o.gap(t, CapOutputStream)
		sb := create(t, newRung(t), newConfig(t, o, nil))
		// Each case's command waits for something only the hook can
		// cause once it is given "first": if the rung did not give out
		// output while the command ran, the command runs to its timeout.
		cases := []struct {
			name string
			// gap skips the case when the rung declares it.
			gap    string
			script string
			limit  int
			// onFirst is what the hook does once it has "first\n".
			onFirst func(cancel context.CancelFunc) error
			check   func(t *testing.T, res sandbox.ExecResult, err error, got *outputLog)
		}{
			{
				name: "until the hook writes a file", gap: CapFilesDuringExec,
				script: "echo first; while [ ! -e stream-go ]; do sleep 0.05; done; echo second",
				onFirst: func(context.CancelFunc) error {
					return sb.WriteFile(t.Context(), "stream-go", []byte("go"), 0o644)
				},
				check: func(t *testing.T, res sandbox.ExecResult, err error, got *outputLog) {
					if err != nil {
						t.Fatal(err)
					}
					if res.TimedOut {
						t.Fatalf("the command waited until its timeout for the file the Output hook writes once it is given \"first\" (by the end it had been given %q): the rung does not give out output while the command runs (declare sandboxtest.CapOutputStream if it cannot)", got.stdout())
					}
					if res.ExitCode != 0 || string(res.Stdout) != "first\nsecond\n" {
						t.Errorf("exit %d stdout %q; want 0, \"first\\nsecond\\n\"", res.ExitCode, res.Stdout)
					}
				},
			},
			{
				name:   "until the hook cancels",
				script: "echo first; sleep 40; echo second",
				onFirst: func(cancel context.CancelFunc) error {
					cancel()
					return nil
				},
				check: func(t *testing.T, res sandbox.ExecResult, err error, got *outputLog) {
					if err == nil && res.TimedOut {
						t.Fatalf("the command ran to its timeout although the Output hook cancels it once it is given \"first\" (by the end it had been given %q): the rung does not give out output while the command runs (declare sandboxtest.CapOutputStream if it cannot)", got.stdout())
					}
					if err == nil {
						t.Errorf("Exec cancelled from the hook returned no error (exit %d, stdout %q)", res.ExitCode, res.Stdout)
					}
				},
			},
			{
				name:   "never past the limit",
				script: "echo first; head -c 300000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2",
				limit:  1000,
				check: func(t *testing.T, res sandbox.ExecResult, err error, got *outputLog) {
					if err != nil {
						t.Fatal(err)
					}
					if len(res.Stdout) != 1000 || len(res.Stderr) != 1000 || !res.Truncated {
						t.Errorf("stdout %d bytes stderr %d truncated %v; want 1000, 1000, true", len(res.Stdout), len(res.Stderr), res.Truncated)
					}
				},
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if why, gap := o.Gaps[tc.gap]; gap {
					t.Skipf("rung declares %s: %s", tc.gap, why)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				got := &outputLog{}
				acted := make(chan error, 1)
				got.onFirst = func() {
					if tc.onFirst == nil {
						return
					}
					// Not in the hook: a file operation may go through
					// the same rung machinery as the command's output.
					go func() { acted <- tc.onFirst(cancel) }()
				}
				res, err := sb.Exec(ctx, sandbox.ExecRequest{
					Argv: []string{"sh", "-c", tc.script}, Timeout: 20 * time.Second, OutputLimit: tc.limit, Output: got.hook,
				})
				got.returned.Store(true)
				if got.fired.Load() && tc.onFirst != nil {
					if aerr := <-acted; aerr != nil {
						t.Errorf("the hook's action once given \"first\": %v", aerr)
					}
				}
				tc.check(t, res, err, got)
				got.checkContract(t, res, err)
			})
		}
		mustSh(t, sb, "true") // the sandbox still works
	})

	t.Run("Timeout", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		res := sh(t, sb, "while :; do echo t >> tick; sleep 0.05; done", withTimeout(time.Second))
		if !res.TimedOut || !hasDenial(res, "timeout") || res.ExitCode == 0 {
			t.Errorf("timed out command: timed_out=%v exit=%d denials=%v; want true, non-zero, a timeout denial", res.TimedOut, res.ExitCode, res.Denials)
		}
		assertStopped(t, sb, "tick")
		mustSh(t, sb, "true") // the sandbox still works
	})

	t.Run("KillsLeftovers", func(t *testing.T) {
		sb := create(t, newRung(t), newConfig(t, o, nil))
		// The loop ends by itself after ~10 s so a failing rung cannot leave
		// it running forever.
		res := sh(t, sb, "(for i in $(seq 200); do echo x >> marker; sleep 0.05; done) & sleep 0.3; echo started", withTimeout(20*time.Second))
		if res.TimedOut || trim(res.Stdout) != "started" {
			t.Fatalf("a backgrounded process must not hold the command open: %+v", res)
		}
		assertStopped(t, sb, "marker")
	})

	t.Run("NetworkDeny", func(t *testing.T) {
		o.gap(t, CapNetworkDeny)
		needPython(t)
		sb := create(t, newRung(t), newConfig(t, o, nil))
		ln, accepted := listenTCP(t)
		port := ln.Addr().(*net.TCPAddr).Port
		res := sh(t, sb, fmt.Sprintf(`python3 -c "import socket; socket.create_connection(('127.0.0.1', %d), 3)"`, port))
		if res.ExitCode == 0 {
			t.Errorf("TCP connect to the host's 127.0.0.1:%d succeeded under network: deny", port)
		}
		if n := accepted(); n > 0 {
			t.Errorf("the host listener accepted %d connections from the sandbox", n)
		}
		res = sh(t, sb, `python3 -c "import socket; socket.getaddrinfo('example.com', 443)"`)
		if res.ExitCode == 0 {
			t.Errorf("DNS resolution works under network: deny")
		}
	})

	t.Run("MemoryLimit", func(t *testing.T) {
		o.gap(t, CapMemoryLimit)
		needPython(t)
		sb := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) { c.Limits.MemoryMB = 128 }))
		res := sh(t, sb, `python3 -c "
b = []
while True:
    b.append(bytearray(8 << 20))
"`, withTimeout(30*time.Second))
		if res.ExitCode == 0 || res.TimedOut {
			t.Fatalf("memory hog under memory_mb 128: exit %d timed_out %v; want stopped", res.ExitCode, res.TimedOut)
		}
		if why, gap := o.Gaps[CapMemoryDenial]; gap {
			t.Logf("memory hog stopped (exit %d); no denial expected: %s", res.ExitCode, why)
		} else if !hasDenial(res, "oom", "memory") {
			t.Errorf("memory hog stopped (exit %d) but no oom/memory denial: %v; stderr %s", res.ExitCode, res.Denials, short(res.Stderr))
		}
		mustSh(t, sb, "true")
	})

	t.Run("ReadOnlyRoot", func(t *testing.T) {
		o.gap(t, CapReadOnlyRoot)
		sb := create(t, newRung(t), newConfig(t, o, func(c *sandbox.Config) { c.ReadOnlyRoot = true }))
		if res := sh(t, sb, "echo x > /evalsi-ro-probe"); res.ExitCode == 0 {
			t.Errorf("write to / succeeded with read_only_root")
		}
		if res := sh(t, sb, "echo x > /etc/evalsi-ro-probe"); res.ExitCode == 0 {
			t.Errorf("write to /etc succeeded with read_only_root")
		}
		mustSh(t, sb, "echo x > ./ok && echo x > /tmp/ok && cat ./ok /tmp/ok")
	})

	t.Run("PrivateRoot", func(t *testing.T) {
		o.gap(t, CapPrivateRoot)
		sb := create(t, newRung(t), newConfig(t, o, nil))
		name := "/evalsi-private-root-" + strconv.Itoa(os.Getpid())
		mustSh(t, sb, "echo private > "+name)
		if got := mustSh(t, sb, "cat "+name); got != "private\n" {
			t.Errorf("write outside the workdir did not persist across commands: %q", got)
		}
		if _, err := os.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
			os.Remove(name)
			t.Errorf("a write to %s inside the sandbox reached the host (%v)", name, err)
		}
		if b, err := sb.ReadFile(t.Context(), name); err != nil || string(b) != "private\n" {
			t.Errorf("ReadFile of an absolute path in the private root: %q, %v", b, err)
		}
	})

	t.Run("SnapshotRestore", func(t *testing.T) {
		r := newRung(t)
		sb := create(t, r, newConfig(t, o, nil))
		snap, ok := sb.(sandbox.Snapshotter)
		if !ok {
			if why, gap := o.Gaps[CapSnapshot]; gap {
				t.Skipf("rung declares no snapshots: %s", why)
			}
			t.Fatalf("%s sandboxes do not implement sandbox.Snapshotter and Options does not declare the gap", r.Name())
		}
		ctx := t.Context()
		if err := sb.WriteFile(ctx, "keep.txt", []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "mkdir -p deps && echo installed > deps/lib.txt && echo gone > remove-me.txt")
		mustSh(t, sb, "rm remove-me.txt")
		layer, err := snap.Snapshot(ctx)
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if layer.Dir == "" && layer.Ref == "" {
			t.Fatalf("Snapshot returned an empty layer")
		}
		if err := sb.Close(ctx); err != nil {
			t.Fatalf("Close after Snapshot: %v", err)
		}
		before := listTree(t, layer.Dir)

		for i := range 2 {
			sb2 := create(t, r, newConfig(t, o, func(c *sandbox.Config) { c.Layers = []sandbox.Layer{layer} }))
			if got := mustSh(t, sb2, "cat keep.txt deps/lib.txt; test ! -e remove-me.txt && echo deleted-stays-deleted"); got != "keptinstalled\ndeleted-stays-deleted\n" {
				t.Errorf("restore %d: got %q", i, got)
			}
			// Changes in a restored sandbox never reach the layer.
			mustSh(t, sb2, "echo changed > keep.txt && rm -r deps && echo new > new.txt")
			if err := sb2.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if after := listTree(t, layer.Dir); after != before {
				t.Fatalf("restore %d modified the layer:\nbefore:\n%s\nafter:\n%s", i, before, after)
			}
		}
	})

	fidelity(t, newRung, o)

	t.Run("CloseIdempotent", func(t *testing.T) {
		r := newRung(t)
		cfg := newConfig(t, o, nil)
		sb, err := r.Create(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, sb, "echo x > f")
		for i := range 2 {
			if err := sb.Close(t.Context()); err != nil {
				t.Errorf("Close #%d: %v", i+1, err)
			}
		}
		if _, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}}); err == nil {
			t.Errorf("Exec after Close must fail")
		}
	})
}

// outputLog is an ExecRequest.Output hook that keeps what it is given and
// notes breaches of the hook's contract: a call while another runs, or
// after Exec returned.
type outputLog struct {
	mu       sync.Mutex
	got      [2][]byte
	inFlight atomic.Int32
	// concurrent, late: calls made while another ran, after Exec returned.
	concurrent, late atomic.Int32
	returned         atomic.Bool
	// fired is set, and onFirst called, when stdout first holds "first\n".
	fired   atomic.Bool
	onFirst func()
}

func (l *outputLog) hook(stderr bool, p []byte) {
	if l.returned.Load() {
		l.late.Add(1)
	}
	if l.inFlight.Add(1) > 1 {
		l.concurrent.Add(1)
	}
	defer l.inFlight.Add(-1)
	i := 0
	if stderr {
		i = 1
	}
	l.mu.Lock()
	l.got[i] = append(l.got[i], p...)
	first := bytes.HasPrefix(l.got[0], []byte("first\n"))
	l.mu.Unlock()
	if first && !l.fired.Swap(true) && l.onFirst != nil {
		l.onFirst()
	}
}

func (l *outputLog) stdout() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.got[0])
}

// checkContract checks what ExecRequest.Output promises: what the hook got
// is a prefix of each stream of the result (so never past its limit), from
// one call at a time, none after Exec returned.
func (l *outputLog) checkContract(t *testing.T, res sandbox.ExecResult, err error) {
	t.Helper()
	l.mu.Lock()
	got := l.got
	l.mu.Unlock()
	if err == nil {
		for i, stream := range [][]byte{res.Stdout, res.Stderr} {
			if !bytes.HasPrefix(stream, got[i]) {
				t.Errorf("the Output hook was given %q on %s, not a prefix of the result's %q", short(got[i]), []string{"stdout", "stderr"}[i], short(stream))
			}
		}
	}
	if n := l.concurrent.Load(); n > 0 {
		t.Errorf("the Output hook was called %d time(s) while another call of it ran", n)
	}
	if n := l.late.Load(); n > 0 {
		t.Errorf("the Output hook was called %d time(s) after Exec returned", n)
	}
}

// assertStopped checks that nothing keeps appending to file in the workdir
// once the command has ended.
func assertStopped(t *testing.T, sb sandbox.Sandbox, file string) {
	t.Helper()
	size := func() int {
		b, err := sb.ReadFile(t.Context(), file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reading %s: %v", file, err)
		}
		return len(b)
	}
	first := size()
	time.Sleep(500 * time.Millisecond)
	if second := size(); second != first {
		t.Errorf("a process of the ended command is still running: %s grew from %d to %d bytes", file, first, second)
	}
}

// listTree renders a directory tree (names, modes, sizes, contents' length
// and mtimes) so a layer can be compared before and after use.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	if dir == "" {
		return ""
	}
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %d %d\n", rel, info.Mode(), info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatalf("listing layer %s: %v", dir, err)
	}
	return b.String()
}

// listenTCP opens a listener on the host's loopback and counts what it
// accepts; the count is read after the probe command ended.
func listenTCP(t *testing.T) (net.Listener, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := make(chan int, 1)
	n <- 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			n <- <-n + 1
		}
	}()
	return ln, func() int { v := <-n; n <- v; return v }
}

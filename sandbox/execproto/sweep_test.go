package execproto

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tree keeps a leader's descendants and nothing else, and recovers from
// the stale links a snapshot read one process at a time can hold: a
// parent gone since (the child re-read), a parent younger than the child
// (a reused pid: not its parent). Real processes, never killed: killOutside
// itself runs only as the sandbox's PID 1.
func TestTreeKeepsLeaderDescendants(t *testing.T) {
	leader := exec.Command("sh", "-c", "sleep 60 & echo $!; wait")
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Process.Kill(); leader.Wait() })
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("child pid %q: %v", buf[:n], err)
	}
	lp := leader.Process.Pid
	me := os.Getpid()
	snapshot := func() *tree {
		tr := &tree{procs: map[int]proc{}, leaders: map[int]bool{lp: true}, kept: map[int]bool{}}
		for _, pid := range pids() {
			if p, ok := readProc(pid); ok {
				tr.procs[pid] = p
			}
		}
		return tr
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, ok := readProc(child); ok && p.ppid == lp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader's child did not appear")
		}
	}

	for _, tc := range []struct {
		name  string
		pid   int
		stale func(*tree)
		want  bool
	}{
		{"leader", lp, nil, true},
		{"its child", child, nil, true},
		{"the test itself", me, nil, false},
		{"its child, read with a parent gone since", child, func(tr *tree) {
			p := tr.procs[child]
			p.ppid = 1 << 30 // no such process
			tr.procs[child] = p
		}, true},
		{"the test, read as a child of a leader younger than it", me, func(tr *tree) {
			p := tr.procs[me]
			p.ppid, p.start = lp, 0
			tr.procs[me] = p
		}, false},
		{"the test, read as a child of the leader's child, younger than it", me, func(tr *tree) {
			p := tr.procs[me]
			p.ppid, p.start = child, tr.procs[child].start-1
			tr.procs[me] = p
		}, false},
	} {
		tr := snapshot()
		if tc.stale != nil {
			tc.stale(tr)
		}
		if got := tr.keep(tc.pid); got != tc.want {
			t.Errorf("%s (pid %d): kept %v, want %v", tc.name, tc.pid, got, tc.want)
		}
	}
}

package execproto

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// What the sweep after a command spares: each running service's leader
// (its first process, a child of the server) and every descendant of it.
// The leader is a child subreaper (the init helper sets it before it execs
// the service), so what the service starts stays its descendant however it
// detaches: a daemon's double fork and setsid reparent the daemon to the
// leader, not to the server. No command's process can be among them: a
// process's parent is fixed at fork (a command's are the server or its own
// processes), and an orphan goes to its nearest subreaper ancestor, never
// into another tree. A leader is known by its pid while the server has not
// reaped it, which is when that pid cannot be another process's: reap
// drops it from the services under the lock the sweep holds.

// proc is what the sweep reads of a process from /proc/PID/stat.
type proc struct {
	ppid, sid int
	start     uint64 // clock ticks after boot
	zombie    bool
	// kthread: a kernel thread (PF_KTHREAD), which a guest's PID 1 sees
	// in /proc and signals do not end: never one of a command's.
	kthread bool
}

// readProc reads /proc/PID/stat; false: the process is gone.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid pgrp session … starttime (field 22); comm may
	// hold spaces, parentheses and newlines, so fields count from the
	// last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	flags, err4 := strconv.ParseUint(f[6], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return proc{}, false
	}
	return proc{ppid: ppid, sid: sid, start: start, zombie: f[0] == "Z", kthread: flags&pfKthread != 0}, true
}

const pfKthread = 0x00200000

// pids lists the processes of the namespace but PID 1.
func pids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 {
			out = append(out, pid)
		}
	}
	return out
}

// killSessions SIGKILLs every process but PID 1 (and zombies) whose
// session kill selects and returns how many it found.
func killSessions(kill func(sid int) bool) int {
	n := 0
	for _, pid := range pids() {
		if p, ok := readProc(pid); ok && !p.zombie && !p.kthread && kill(p.sid) {
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// killOutside SIGKILLs every process but PID 1 (and zombies) that is
// neither one of leaders nor a descendant of one, and returns how many it
// found. The caller keeps leaders from changing meanwhile.
func killOutside(leaders map[int]bool) int {
	t := tree{procs: map[int]proc{}, leaders: leaders, kept: map[int]bool{}}
	all := pids()
	for _, pid := range all {
		if p, ok := readProc(pid); ok {
			t.procs[pid] = p
		}
	}
	n := 0
	for _, pid := range all {
		if p, ok := t.procs[pid]; ok && !p.zombie && !p.kthread && !t.keep(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// tree walks parent links in a snapshot of /proc that was read one
// process at a time, so links may be stale: a parent that has exited
// since its child was read (the child now has another parent, the
// service's leader if it was the service's), or whose pid another process
// has taken since (younger than the child: never its parent).
type tree struct {
	procs   map[int]proc
	leaders map[int]bool
	kept    map[int]bool // memo; false while pid is being walked
}

// keep says whether pid is a leader or descends from one.
func (t *tree) keep(pid int) bool {
	if v, ok := t.kept[pid]; ok {
		return v
	}
	t.kept[pid] = false // a cycle of stale links keeps nothing
	v := t.walk(pid)
	t.kept[pid] = v
	return v
}

func (t *tree) walk(pid int) bool {
	if t.leaders[pid] {
		return true
	}
	p, ok := t.procs[pid]
	for fresh := false; ok; fresh = true {
		if p.ppid <= 1 {
			// The server's child or orphan: not a leader, so none of a
			// service's (a leader's descendants reparent to it while it
			// lives).
			return false
		}
		if parent, ok := t.get(p.ppid); ok && parent.start <= p.start {
			return t.keep(p.ppid)
		}
		if fresh {
			return false
		}
		// The link is stale: read pid again, for its parent now.
		if p, ok = readProc(pid); ok {
			t.procs[pid] = p
		} else {
			delete(t.procs, pid)
		}
	}
	return false
}

// get is pid's entry, read now if the snapshot lacks it.
func (t *tree) get(pid int) (proc, bool) {
	if p, ok := t.procs[pid]; ok {
		return p, true
	}
	p, ok := readProc(pid)
	if ok {
		t.procs[pid] = p
	}
	return p, ok
}

package helper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/internal/execuser"
)

// Init is the container's pid 1: it makes the workdir, then kills and
// reaps whatever reaches it until the pod is deleted. Every command runs
// under a helper that is a child subreaper, so only the orphans of a
// helper that died (a command as root may kill its own) are re-parented
// here: left running they would outlive their command. Being pid 1,
// signals from inside the container cannot kill it.
func Init(workdir string) error {
	if workdir != "" {
		if err := os.MkdirAll(workdir, 0o755); err != nil {
			return fmt.Errorf("making the workdir %s: %w", workdir, err)
		}
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	// Nothing signals an orphan's arrival: look every second.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGCHLD {
				return nil
			}
		case <-tick.C:
			for _, pid := range children(os.Getpid()) {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		for {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}

// Run serves one call: the request from stdin, frames to stdout.
func Run(stdin io.Reader, stdout io.Writer) error {
	// Commands run as root in the same container: without this they could
	// open this process's /proc/PID/fd (its stream to the rung) or memory.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	in := bufio.NewReader(stdin)
	req, err := ReadRequest(in)
	if err != nil {
		return err
	}
	out := &frameOut{w: stdout}
	var res Result
	switch req.Op {
	case OpExec, OpService:
		res = runCommand(req, in, out)
	case OpRead:
		res = readFile(req, out)
	case OpWrite:
		res = writeFile(req, in)
	default:
		res.Error = fmt.Sprintf("unknown op %q", req.Op)
	}
	b, _ := json.Marshal(res)
	return out.frame(FrameResult, b)
}

// frameOut serialises frames from the output readers and the heartbeat.
type frameOut struct {
	mu   sync.Mutex
	w    io.Writer
	gone bool
}

func (f *frameOut) frame(kind byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		return io.ErrClosedPipe
	}
	// At least one frame (a heartbeat is empty), none above MaxFrame.
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), MaxFrame)
		if err := WriteFrame(f.w, kind, p[:n]); err != nil {
			f.gone = true
			return err
		}
		p = p[n:]
	}
	return nil
}

func fail(format string, args ...any) Result {
	return Result{Error: fmt.Sprintf(format, args...)}
}

// runCommand runs req.Argv as docker exec would and kills whatever it
// leaves behind: the helper is a child subreaper, so every orphan of the
// command (a double-forked setsid daemon included) becomes its child, and
// once the command ends it kills its children until none are left.
func runCommand(req Request, stdin io.Reader, out *frameOut) Result {
	if len(req.Argv) == 0 {
		return fail("empty argv")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("becoming a child subreaper: %v", err)
	}
	spec := req.User
	if spec == "" {
		spec = "0"
	}
	u, err := execuser.Lookup(spec, "/etc")
	if err != nil {
		return fail("%v", err)
	}
	env := req.Env
	if !hasVar(env, "HOME") {
		env = append(env, "HOME="+u.Home)
	}
	cmd := &exec.Cmd{Path: lookPath(req.Argv[0], env), Args: req.Argv, Env: env, Dir: req.Workdir}
	if cmd.Path == "" {
		out.frame(FrameStderr, []byte(fmt.Sprintf("evalsi: %s: command not found\n", req.Argv[0])))
		return Result{ExitCode: 127}
	}
	groups := make([]uint32, 0, len(u.Sgids))
	for _, g := range u.Sgids {
		groups = append(groups, uint32(g))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: uint32(u.Uid), Gid: uint32(u.Gid), Groups: groups},
	}
	if req.FileSizeMB > 0 {
		n := uint64(req.FileSizeMB) << 20
		// Inherited by the command; the helper itself writes no files here.
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fail("setting RLIMIT_FSIZE: %v", err)
		}
	}
	if req.Stdin {
		cmd.Stdin = stdin
	}
	var res Result
	var wg sync.WaitGroup
	streams := []struct {
		kind byte
		set  func(*os.File)
	}{{FrameStdout, func(f *os.File) { cmd.Stdout = f }}, {FrameStderr, func(f *os.File) { cmd.Stderr = f }}}
	if req.Op == OpService {
		// A service's output is one interleaved tail: one pipe keeps
		// the order its writes happened in, as a container's log does.
		streams = streams[:1]
		streams[0].set = func(f *os.File) { cmd.Stdout, cmd.Stderr = f, f }
	}
	var writers []*os.File
	var truncMu sync.Mutex
	for _, s := range streams {
		r, w, err := os.Pipe()
		if err != nil {
			return fail("making a pipe: %v", err)
		}
		s.set(w)
		writers = append(writers, w)
		wg.Add(1)
		go func(kind byte) {
			defer wg.Done()
			defer r.Close()
			if pump(r, out, kind, req.OutputLimit) {
				truncMu.Lock()
				res.Truncated = true
				truncMu.Unlock()
			}
		}(s.kind)
	}
	oomBefore := oomKills()
	if err := cmd.Start(); err != nil {
		for _, w := range writers {
			w.Close()
		}
		wg.Wait()
		out.frame(FrameStderr, []byte(fmt.Sprintf("evalsi: %s: %v\n", req.Argv[0], err)))
		if errors.Is(err, fs.ErrPermission) {
			return Result{ExitCode: 126}
		}
		return Result{ExitCode: 127}
	}
	for _, w := range writers {
		w.Close()
	}
	// The command runs: say so at once (StartService waits for it).
	out.frame(FrameHeartbeat, nil)
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	var timedOut bool
	var mu sync.Mutex
	go func() {
		var deadline <-chan time.Time
		if req.Timeout > 0 {
			t := time.NewTimer(req.Timeout)
			defer t.Stop()
			deadline = t.C
		}
		beat := time.NewTicker(time.Second)
		defer beat.Stop()
		for {
			select {
			case <-done:
				return
			case <-deadline:
				mu.Lock()
				timedOut = true
				mu.Unlock()
				unix.Kill(-pgid, unix.SIGKILL)
				cmd.Process.Kill()
			case <-beat.C:
				if out.frame(FrameHeartbeat, nil) != nil {
					// The rung went away (its ctx ended): stop the command.
					unix.Kill(-pgid, unix.SIGKILL)
					cmd.Process.Kill()
				}
			}
		}
	}()
	st, err := cmd.Process.Wait()
	close(done)
	killDescendants()
	// Every writer of the pipes is dead now; a bound anyway, in case a
	// descriptor reached a process outside this tree.
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
	}
	if err != nil {
		return fail("waiting for the command: %v", err)
	}
	mu.Lock()
	res.TimedOut = timedOut
	mu.Unlock()
	ws := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
	}
	res.OOMKills = oomKills() - oomBefore
	return res
}

// pump copies r to frames of kind, at most limit bytes (0: all), draining
// the rest so the command never blocks on a full pipe. It reports whether
// anything was dropped.
func pump(r io.Reader, out *frameOut, kind byte, limit int) (truncated bool) {
	buf := make([]byte, 32<<10)
	sent := 0
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p := buf[:n]
			if limit > 0 && sent+n > limit {
				p = p[:max(limit-sent, 0)]
				truncated = true
			}
			if len(p) > 0 {
				out.frame(kind, p)
				sent += len(p)
			}
		}
		if err != nil {
			return truncated
		}
	}
}

// killDescendants kills this process's children until there are none; as
// a subreaper, orphaned grandchildren become children as their parents die.
func killDescendants() {
	self := os.Getpid()
	for range 1000 {
		kids := children(self)
		for _, pid := range kids {
			unix.Kill(pid, unix.SIGKILL)
		}
		reaped := false
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			reaped = true
		}
		if len(kids) == 0 && !reaped {
			if pid, _ := unix.Wait4(-1, nil, unix.WNOHANG, nil); pid <= 0 {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// children lists the pids whose parent is ppid, from /proc.
func children(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if p, err := strconv.Atoi(f[1]); err == nil && p == ppid {
				out = append(out, pid)
			}
		}
	}
	return out
}

// oomKills is the container cgroup's oom_kill count: the container's
// cgroup is at /sys/fs/cgroup (v2, its cgroup namespace) or its memory
// controller's at /sys/fs/cgroup/memory (v1).
func oomKills() int {
	for _, f := range []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return 0
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// lookPath finds file in the command's PATH (not the helper's), as the
// container runtime does for docker exec.
func lookPath(file string, env []string) string {
	if strings.Contains(file, "/") {
		return file
	}
	path := sandbox.DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// readFile streams a regular file of at most sandbox.MaxReadFile bytes.
func readFile(req Request, out *frameOut) Result {
	f, err := os.OpenFile(req.Path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return Result{Error: err.Error(), NotExist: errors.Is(err, fs.ErrNotExist)}
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fail("%v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail("%v", sandbox.NotRegular(sandbox.FileKind(st.Mode)))
	}
	if st.Size > sandbox.MaxReadFile {
		return fail("it is %d bytes, larger than the %d MiB read cap", st.Size, sandbox.MaxReadFile>>20)
	}
	buf := make([]byte, 256<<10)
	total := 0
	for {
		n, err := f.Read(buf)
		total += n
		if total > sandbox.MaxReadFile {
			return fail("it grew past the %d MiB read cap while being read", sandbox.MaxReadFile>>20)
		}
		if n > 0 {
			if out.frame(FrameStdout, buf[:n]) != nil {
				return fail("the rung went away")
			}
		}
		if err == io.EOF {
			return Result{}
		}
		if err != nil {
			return fail("%v", err)
		}
	}
}

// writeFile writes stdin's bytes to req.Path, creating parents, as root.
func writeFile(req Request, in io.Reader) Result {
	if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
		return fail("%v", err)
	}
	if st, err := os.Lstat(req.Path); err == nil && !st.Mode().IsRegular() && st.Mode()&fs.ModeSymlink == 0 {
		return fail("%v", sandbox.NotRegular(sandbox.FileKind(uint32(st.Sys().(*syscall.Stat_t).Mode))))
	}
	mode := fs.FileMode(req.Mode) & fs.ModePerm
	f, err := os.OpenFile(req.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK|syscall.O_NOCTTY, mode)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fail("%v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail("%v", sandbox.NotRegular(sandbox.FileKind(st.Mode)))
	}
	if _, err := io.Copy(f, in); err != nil {
		return fail("%v", err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail("%v", err)
	}
	if err := f.Close(); err != nil {
		return fail("%v", err)
	}
	return Result{}
}

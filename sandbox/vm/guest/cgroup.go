package guest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/execproto"
)

// cgroups gives each command a cgroup v2 of its own under the guest's
// root cgroup, with the sandbox's limits, which its first process is
// forked in (join). The server reaches the hierarchy through root, a directory
// descriptor of a writable cgroup2 mount that commands cannot see (the
// /sys/fs/cgroup they see is read-only): root in the guest with
// CAP_DAC_OVERRIDE, a command could otherwise raise its own limits.
type cgroups struct {
	root int // O_DIRECTORY descriptor of the hierarchy's root
	log  *slog.Logger

	mu     sync.Mutex
	limits cgLimits
	next   int
}

type cgLimits struct {
	memoryMB, pidsMax, cpuMillis int
}

func (c *cgroups) setLimits(l cgLimits) {
	c.mu.Lock()
	c.limits = l
	c.mu.Unlock()
}

// enableControllers lets the root's children use memory, pids and cpu.
func enableControllers(root int) error {
	return writeAt(root, "cgroup.subtree_control", "+memory +pids +cpu")
}

func writeAt(dir int, name, value string) error {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, name, err)
	}
	return nil
}

func readAt(dir int, name string) (string, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}

// eventCount is key's count in a cgroup events file ("key N" lines).
func eventCount(events, key string) int {
	for _, line := range strings.Split(events, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// confine is execproto.ServeOptions.Confine.
func (c *cgroups) confine(service bool) (execproto.Confinement, error) {
	c.mu.Lock()
	c.next++
	name := "cmd-" + strconv.Itoa(c.next)
	l := c.limits
	c.mu.Unlock()
	if err := unix.Mkdirat(c.root, name, 0o755); err != nil {
		return execproto.Confinement{}, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	fd, err := unix.Openat(c.root, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlinkat(c.root, name, unix.AT_REMOVEDIR)
		return execproto.Confinement{}, fmt.Errorf("opening cgroup %s: %w", name, err)
	}
	dir := os.NewFile(uintptr(fd), name)
	var settings [][2]string
	if l.memoryMB > 0 {
		// No swap in a guest, but should one exist it must not extend
		// the limit.
		settings = append(settings, [2]string{"memory.max", strconv.Itoa(l.memoryMB << 20)}, [2]string{"memory.swap.max", "0"})
	}
	if l.pidsMax > 0 {
		settings = append(settings, [2]string{"pids.max", strconv.Itoa(l.pidsMax)})
	}
	if l.cpuMillis > 0 {
		// cpu.max is "QUOTA PERIOD" in µs; CPUMillis thousandths of a CPU
		// per 100 ms period.
		settings = append(settings, [2]string{"cpu.max", strconv.Itoa(l.cpuMillis*100) + " 100000"})
	}
	for _, s := range settings {
		if err := writeAt(fd, s[0], s[1]); err != nil && !(s[0] == "memory.swap.max" && errors.Is(err, unix.ENOENT)) {
			dir.Close()
			unix.Unlinkat(c.root, name, unix.AT_REMOVEDIR)
			return execproto.Confinement{}, fmt.Errorf("cgroup %s: %w", name, err)
		}
	}
	return execproto.Confinement{
		Join:   func() (func(), error) { return c.join(fd, name, l) },
		Finish: func() []execproto.Denial { return c.finish(dir, name, l) },
	}, nil
}

// pidsMargin is what pids.max is raised by, beyond the guest init's
// threads, while the init is in a command's cgroup: the Go runtime may
// start a thread or two meanwhile.
const pidsMargin = 32

// join moves the guest init into the command's cgroup (fd, called name)
// for the fork of its first process (execproto.Confinement.Join: the
// seccomp filter rules out clone3's CLONE_INTO_CGROUP), as the bwrap
// rung's host does for its server under cgroup v2. The init's threads
// count in pids.current while it is in, so pids.max is raised by them
// until leave; the command's processes may exceed its limit by that much
// only in the moment between its exec and leave. What the init allocates
// meanwhile is charged to the command's memory: a few pages.
func (c *cgroups) join(fd int, name string, l cgLimits) (func(), error) {
	if l.pidsMax > 0 {
		threads, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return nil, fmt.Errorf("counting the guest init's threads: %w", err)
		}
		if err := writeAt(fd, "pids.max", strconv.Itoa(l.pidsMax+len(threads)+pidsMargin)); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", name, err)
		}
	}
	restore := func() {
		if l.pidsMax > 0 {
			if err := writeAt(fd, "pids.max", strconv.Itoa(l.pidsMax)); err != nil {
				c.log.Error("restoring a command's process limit", "cgroup", name, "err", err)
			}
		}
	}
	// "0" is the writer's own process.
	if err := writeAt(fd, "cgroup.procs", "0"); err != nil {
		restore()
		return nil, fmt.Errorf("moving the guest init into cgroup %s: %w", name, err)
	}
	return func() {
		if err := writeAt(c.root, "cgroup.procs", "0"); err != nil {
			// Left in, the init would count in every limit of that
			// command and keep its cgroup from being removed.
			c.log.Error("moving the guest init back out of a command's cgroup", "cgroup", name, "err", err)
		}
		restore()
	}, nil
}

// finish ends what is left in the cgroup, reads which limits it hit, and
// removes it.
func (c *cgroups) finish(dir *os.File, name string, l cgLimits) []execproto.Denial {
	defer dir.Close()
	fd := int(dir.Fd())
	var out []execproto.Denial
	if ev, err := readAt(fd, "memory.events"); err == nil {
		if n := eventCount(ev, "oom_kill"); n > 0 {
			out = append(out, execproto.Denial{Kind: "oom", Syscall: -1, Count: n,
				Detail: fmt.Sprintf("the memory limit (%d MiB) was reached: the kernel killed %d process(es)", l.memoryMB, n)})
		}
	}
	if ev, err := readAt(fd, "pids.events"); err == nil {
		if n := eventCount(ev, "max"); n > 0 {
			out = append(out, execproto.Denial{Kind: "pids", Syscall: -1, Count: n,
				Detail: fmt.Sprintf("the process limit (%d) was reached: %d fork(s) refused", l.pidsMax, n)})
		}
	}
	writeAt(fd, "cgroup.kill", "1")
	for range 400 {
		if err := unix.Unlinkat(c.root, name, unix.AT_REMOVEDIR); err == nil || errors.Is(err, unix.ENOENT) {
			return out
		}
		// EBUSY until the killed processes are gone.
		time.Sleep(5 * time.Millisecond)
	}
	return out
}

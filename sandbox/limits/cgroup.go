package limits

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"evals.si/sandbox"
)

// Cgroups makes one cgroup per command under a parent the engine may write:
// a delegated cgroup v2 directory, or (as root on a hybrid host whose v2
// hierarchy has no memory or pids controller) the engine's own cgroups of
// the v1 pids, memory and cpu controllers.
type Cgroups struct {
	version int
	// parent is the v2 parent directory.
	parent string
	// v1 maps a v1 controller (pids, memory, cpu) to its parent directory.
	v1 map[string]string
}

// Version is 1 or 2.
func (c *Cgroups) Version() int { return c.version }

// Describe names the hierarchy for reports.
func (c *Cgroups) Describe() string {
	if c.version == 2 {
		return "cgroup v2 under " + c.parent
	}
	var parts []string
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		if d, ok := c.v1[ctrl]; ok {
			parts = append(parts, ctrl+"="+d)
		}
	}
	return "cgroup v1 (" + strings.Join(parts, ", ") + ")"
}

// HasMemory reports whether the memory controller is available, so callers
// know whether memory must instead be bounded by RLIMIT_AS.
func (c *Cgroups) HasMemory() bool {
	if c == nil {
		return false
	}
	if c.version == 2 {
		return true
	}
	_, ok := c.v1["memory"]
	return ok
}

// OpenV2 uses parent, a cgroup v2 directory the engine may write (delegated),
// as the parent of per-command cgroups, enabling the memory, pids and (when
// present) cpu controllers for its children.
func OpenV2(parent string) (*Cgroups, error) {
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("using %s as a cgroup v2 parent: %w (is it a cgroup v2 directory?)", parent, err)
	}
	have := strings.Fields(string(b))
	for _, need := range []string{"memory", "pids"} {
		if !slices.Contains(have, need) {
			return nil, fmt.Errorf("using %s as a cgroup v2 parent: controller %q not available there (has %q); delegate it or set sandbox.cgroup: off", parent, need, have)
		}
	}
	want := []string{"memory", "pids"}
	if slices.Contains(have, "cpu") {
		want = append(want, "cpu")
	}
	enabled, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	for _, ctrl := range want {
		if slices.Contains(strings.Fields(string(enabled)), ctrl) {
			continue
		}
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+"+ctrl); err != nil {
			if ctrl == "cpu" {
				continue
			}
			return nil, fmt.Errorf("enabling the %s controller in %s: %w (a v2 parent with processes in it cannot delegate controllers; use a dedicated subdirectory)", ctrl, parent, err)
		}
	}
	return &Cgroups{version: 2, parent: parent}, nil
}

// OpenV1 uses the engine's own cgroups of the v1 memory, pids and cpu
// controllers mounted under root (normally /sys/fs/cgroup) as parents;
// selfCgroup is the content of /proc/self/cgroup. It needs write access to
// those directories (root). At least pids must be present.
func OpenV1(root, selfCgroup string) (*Cgroups, error) {
	own := map[string]string{}
	for _, line := range strings.Split(selfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			own[ctrl] = parts[2]
		}
	}
	c := &Cgroups{version: 1, v1: map[string]string{}}
	for _, ctrl := range []string{"pids", "memory", "cpu"} {
		p, ok := own[ctrl]
		if !ok {
			continue
		}
		dir := filepath.Join(root, ctrl, p)
		if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
			continue
		}
		c.v1[ctrl] = dir
	}
	if _, ok := c.v1["pids"]; !ok {
		return nil, fmt.Errorf("no writable cgroup v1 pids controller under %s", root)
	}
	return c, nil
}

// Host describes where to look for cgroups; tests point it at a fake tree.
type Host struct {
	// Root is where cgroup hierarchies are mounted (/sys/fs/cgroup).
	Root string
	// SelfCgroup is the content of /proc/self/cgroup.
	SelfCgroup string
	// Privileged allows the v1 fallback (the engine runs as root).
	Privileged bool
}

// ThisHost describes the running host.
func ThisHost() Host {
	b, _ := os.ReadFile("/proc/self/cgroup")
	return Host{Root: "/sys/fs/cgroup", SelfCgroup: string(b), Privileged: os.Geteuid() == 0}
}

// Detect resolves the sandbox.cgroup setting: "off" gives nil; a path must
// be a usable v2 parent (an error otherwise, since the user asked for it);
// "auto" or "" tries the engine's own v2 cgroup, then, when privileged, the
// v1 controllers, and otherwise returns nil. The note says what was chosen
// or why none applies, for the isolation report.
func Detect(setting string, h Host) (*Cgroups, string, error) {
	switch setting {
	case "off":
		return nil, "cgroups off (sandbox.cgroup: off)", nil
	case "", "auto":
	default:
		c, err := OpenV2(setting)
		if err != nil {
			return nil, "", err
		}
		return c, c.Describe(), nil
	}
	var why []string
	if p, ok := ownV2(h); ok {
		c, err := OpenV2(p)
		if err == nil {
			return c, c.Describe(), nil
		}
		why = append(why, "cgroup v2 unavailable: "+err.Error())
	} else {
		why = append(why, "cgroup v2 unavailable: no cgroup v2 hierarchy with this process's cgroup under "+h.Root)
	}
	if h.Privileged {
		c, err := OpenV1(h.Root, h.SelfCgroup)
		if err == nil {
			return c, strings.Join(why, "; ") + "; using " + c.Describe(), nil
		}
		why = append(why, "cgroup v1: "+err.Error())
	}
	return nil, strings.Join(why, "; ") + "; limits fall back to rlimits", nil
}

// ownV2 finds the engine's own cgroup v2 directory: the "0::/path" line of
// /proc/self/cgroup under the v2 mount (Root itself on a pure v2 host, or
// Root/unified on a hybrid one).
func ownV2(h Host) (string, bool) {
	var rel string
	found := false
	for _, line := range strings.Split(h.SelfCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", false
	}
	for _, mnt := range []string{h.Root, filepath.Join(h.Root, "unified")} {
		dir := filepath.Join(mnt, rel)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			return dir, true
		}
	}
	return "", false
}

// Cgroup is one command's cgroup.
type Cgroup struct {
	version int
	// dirs: v2 a single directory; v1 one per controller.
	dirs    map[string]string
	applied []string
}

// New creates the cgroup name under the parent and writes l into it
// (PidsMax defaults to DefaultPidsMax; MemoryMB and CPUs 0 mean no limit).
func (c *Cgroups) New(name string, l sandbox.Limits) (*Cgroup, error) {
	g := &Cgroup{version: c.version, dirs: map[string]string{}, applied: c.Plan(l)}
	pids := l.PidsMax
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	fail := func(err error) (*Cgroup, error) {
		g.Remove()
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	if c.version == 2 {
		dir := filepath.Join(c.parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fail(err)
		}
		g.dirs["v2"] = dir
		if l.MemoryMB > 0 {
			if err := writeFile(filepath.Join(dir, "memory.max"), strconv.Itoa(l.MemoryMB<<20)); err != nil {
				return fail(err)
			}
			// Without swap.max a memory hog swaps instead of being killed.
			if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
				if err := writeFile(filepath.Join(dir, "memory.swap.max"), "0"); err != nil {
					return fail(err)
				}
			}
		}
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.Itoa(pids)); err != nil {
			return fail(err)
		}
		if l.CPUs > 0 {
			const period = 100000
			quota := int(l.CPUs * period)
			if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period)); err != nil {
				return fail(err)
			}
		}
		return g, nil
	}
	mk := func(ctrl string) (string, error) {
		dir := filepath.Join(c.v1[ctrl], name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		g.dirs[ctrl] = dir
		return dir, nil
	}
	dir, err := mk("pids")
	if err != nil {
		return fail(err)
	}
	if err := writeFile(filepath.Join(dir, "pids.max"), strconv.Itoa(pids)); err != nil {
		return fail(err)
	}
	if _, ok := c.v1["memory"]; ok && l.MemoryMB > 0 {
		dir, err := mk("memory")
		if err != nil {
			return fail(err)
		}
		v := strconv.Itoa(l.MemoryMB << 20)
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), v); err != nil {
			return fail(err)
		}
		// memsw (memory+swap) exists only with swap accounting; best effort.
		_ = writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), v)
	}
	if _, ok := c.v1["cpu"]; ok && l.CPUs > 0 {
		dir, err := mk("cpu")
		if err != nil {
			return fail(err)
		}
		const period = 100000
		quota := int(l.CPUs * period)
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
			return fail(err)
		}
		if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
			return fail(err)
		}
	}
	return g, nil
}

// Plan lists the limits New writes for l, for an isolation report made
// before any command runs.
func (c *Cgroups) Plan(l sandbox.Limits) []string {
	if c == nil {
		return nil
	}
	pids := l.PidsMax
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	const period = 100000
	var out []string
	if c.version == 2 {
		if l.MemoryMB > 0 {
			out = append(out, fmt.Sprintf("cgroup-v2 memory.max=%dMB", l.MemoryMB))
		}
		out = append(out, fmt.Sprintf("cgroup-v2 pids.max=%d", pids))
		if l.CPUs > 0 {
			out = append(out, fmt.Sprintf("cgroup-v2 cpu.max=%d %d", int(l.CPUs*period), period))
		}
		return out
	}
	out = append(out, fmt.Sprintf("cgroup-v1 pids.max=%d", pids))
	if _, ok := c.v1["memory"]; ok && l.MemoryMB > 0 {
		out = append(out, fmt.Sprintf("cgroup-v1 memory.limit_in_bytes=%dMB", l.MemoryMB))
	}
	if _, ok := c.v1["cpu"]; ok && l.CPUs > 0 {
		out = append(out, fmt.Sprintf("cgroup-v1 cpu.cfs_quota_us=%d/%d", int(l.CPUs*period), period))
	}
	return out
}

// Applied describes the limits written, for the isolation report.
func (g *Cgroup) Applied() []string { return slices.Clone(g.applied) }

// ProcsFiles are the cgroup.procs files a process writes its pid into to
// join this cgroup (one per v1 controller).
func (g *Cgroup) ProcsFiles() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(g.dirs)) {
		out = append(out, filepath.Join(g.dirs[k], "cgroup.procs"))
	}
	return out
}

// Events are the counters a command's cgroup collected.
type Events struct {
	// OOMKills is how many processes the OOM killer killed.
	OOMKills int
	// PidsMax is how many forks pids.max refused.
	PidsMax int
}

// Events reads the OOM-kill and pids.max counters.
func (g *Cgroup) Events() (Events, error) {
	var ev Events
	var err error
	if d, ok := g.dirs["v2"]; ok {
		if ev.OOMKills, err = readKey(filepath.Join(d, "memory.events"), "oom_kill"); err != nil {
			return ev, err
		}
		ev.PidsMax, err = readKey(filepath.Join(d, "pids.events"), "max")
		return ev, err
	}
	if d, ok := g.dirs["memory"]; ok {
		if ev.OOMKills, err = readKey(filepath.Join(d, "memory.oom_control"), "oom_kill"); err != nil {
			return ev, err
		}
	}
	if d, ok := g.dirs["pids"]; ok {
		ev.PidsMax, err = readKey(filepath.Join(d, "pids.events"), "max")
	}
	return ev, err
}

// Kill kills every process in the cgroup (cgroup.kill where the kernel has
// it, otherwise SIGKILL to each listed pid until none is left).
func (g *Cgroup) Kill() error {
	if d, ok := g.dirs["v2"]; ok {
		if err := writeFile(filepath.Join(d, "cgroup.kill"), "1"); err == nil {
			return nil
		}
	}
	for range 50 {
		var pids []int
		for _, f := range g.ProcsFiles() {
			b, err := os.ReadFile(f)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				return fmt.Errorf("listing cgroup processes: %w", err)
			}
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("processes keep appearing in the cgroup after SIGKILL")
}

// Remove deletes the cgroup directories, waiting briefly for exiting
// processes to leave. A fake (non-cgroupfs) tree's files are removed too.
func (g *Cgroup) Remove() error {
	var errs []error
	for _, d := range g.dirs {
		var err error
		for range 100 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			if errors.Is(err, syscall.ENOTEMPTY) && !isCgroupFS(d) {
				err = os.RemoveAll(d)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func isCgroupFS(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	const cgroup2Magic, cgroupMagic = 0x63677270, 0x27e0eb
	return st.Type == cgroup2Magic || st.Type == cgroupMagic
}

func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", v, path, err)
	}
	return nil
}

// readKey reads "key N" from a flat-keyed cgroup file; a missing file or
// key counts as 0.
func readKey(path, key string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("reading %s from %s: %w", key, path, err)
			}
			return n, nil
		}
	}
	return 0, sc.Err()
}

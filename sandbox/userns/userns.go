// Package userns gives sandboxes a user namespace in which root is an
// unprivileged id outside, rootless Podman's model: ids 0–65535 inside map
// to a subordinate range of the host, so a sandbox's root keeps the
// capabilities a container's root has inside its namespace (chown, setuid,
// apt-get dropping to _apt) while the kernel treats it, for everything
// outside the namespace (global sysctls, core_pattern, host files), as an
// ordinary user.
//
// ForEngine picks the map; IDMap.Start starts a process as root inside a new
// namespace with it; IDMap.Namespace and IDMapMount present a directory the
// host owns (an unpacked image) owned by the mapped ids, without copying.
package userns

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

// Mapping is one line of uid_map or gid_map: Count ids from Inside map to
// Count ids from Outside.
type Mapping struct{ Inside, Outside, Count int }

// IDMap is a user namespace's uid and gid maps.
type IDMap struct {
	UID, GID []Mapping
	// helper: the maps are written by newuidmap/newgidmap, which needs
	// the child stopped until they are (Start).
	helper bool
}

// Size of the id range a full map covers inside (0–65535).
const fullCount = 65536

// ForEngine chooses the map for sandboxes of this engine process:
//   - as root, ids 0–65535 map to the range /etc/subuid and /etc/subgid give
//     root, else to sandbox.SubordinateIDBase onwards (a root parent may
//     write any map for its child);
//   - otherwise, with newuidmap and newgidmap installed and a range for the
//     user in /etc/subuid and /etc/subgid, 0 maps to the engine's own ids
//     and 1… to that range;
//   - otherwise only 0 maps, to the engine's own ids.
//
// note says which, for isolation reports.
func ForEngine() (m IDMap, note string, err error) {
	uid, gid := os.Geteuid(), os.Getegid()
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	if uid == 0 {
		us, uerr := subordinate("/etc/subuid", name, uid)
		gs, gerr := subordinate("/etc/subgid", name, uid)
		if uerr == nil && gerr == nil && us.Count >= fullCount && gs.Count >= fullCount {
			m = IDMap{UID: []Mapping{{0, us.Outside, fullCount}}, GID: []Mapping{{0, gs.Outside, fullCount}}}
			return m, "user namespace: ids 0-65535 map to root's subordinate ranges in /etc/subuid and /etc/subgid", nil
		}
		full := []Mapping{{0, sandbox.SubordinateIDBase, sandbox.SubordinateIDCount}}
		m = IDMap{UID: full, GID: full}
		return m, fmt.Sprintf("user namespace: ids 0-65535 map to %d-%d (no range of at least 65536 ids for root in /etc/subuid and /etc/subgid)",
			sandbox.SubordinateIDBase, sandbox.SubordinateIDBase+sandbox.SubordinateIDCount-1), nil
	}
	single := IDMap{UID: []Mapping{{0, uid, 1}}, GID: []Mapping{{0, gid, 1}}}
	_, e1 := exec.LookPath("newuidmap")
	_, e2 := exec.LookPath("newgidmap")
	us, uerr := subordinate("/etc/subuid", name, uid)
	gs, gerr := subordinate("/etc/subgid", name, uid)
	if e1 != nil || e2 != nil || uerr != nil || gerr != nil {
		why := "newuidmap/newgidmap are not installed (apt-get install uidmap)"
		if e1 == nil && e2 == nil {
			why = fmt.Sprintf("/etc/subuid or /etc/subgid has no range for %s", name)
		}
		return single, fmt.Sprintf("user namespace: only root maps, to the engine's uid %d (%s): a sandbox cannot switch to other users", uid, why), nil
	}
	n := min(us.Count, gs.Count, fullCount-1)
	m = IDMap{
		UID:    []Mapping{{0, uid, 1}, {1, us.Outside, n}},
		GID:    []Mapping{{0, gid, 1}, {1, gs.Outside, n}},
		helper: true,
	}
	return m, fmt.Sprintf("user namespace: 0 maps to the engine's uid %d, 1-%d to its range in /etc/subuid (written by newuidmap)", uid, n), nil
}

// subordinate finds the first range for name (or the numeric uid) in an
// /etc/subuid-format file.
func subordinate(file, name string, uid int) (Mapping, error) {
	f, err := os.Open(file)
	if err != nil {
		return Mapping{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fs) != 3 || (fs[0] != name && fs[0] != strconv.Itoa(uid)) {
			continue
		}
		start, err1 := strconv.Atoi(fs[1])
		count, err2 := strconv.Atoi(fs[2])
		if err1 == nil && err2 == nil && start > 0 && count > 0 {
			return Mapping{Inside: 0, Outside: start, Count: count}, nil
		}
	}
	return Mapping{}, fmt.Errorf("no range for %s in %s", name, file)
}

// Full reports whether the map covers ids 0–65535, so a sandbox can switch
// users (apt-get's _apt, a Config.User) as a container can.
func (m IDMap) Full() bool { return covered(m.UID) >= fullCount-1 && covered(m.GID) >= fullCount-1 }

func covered(ms []Mapping) int {
	n := 0
	for _, x := range ms {
		n += x.Count
	}
	return n
}

// HostUID is the host uid that id inside maps to.
func (m IDMap) HostUID(id int) (int, bool) { return toHost(m.UID, id) }

// HostGID is the host gid that id inside maps to.
func (m IDMap) HostGID(id int) (int, bool) { return toHost(m.GID, id) }

func toHost(ms []Mapping, id int) (int, bool) {
	for _, x := range ms {
		if id >= x.Inside && id < x.Inside+x.Count {
			return x.Outside + id - x.Inside, true
		}
	}
	return -1, false
}

// Describe renders the uid map for sandbox.Report.UIDMap, in uid_map's
// order: "0-65535 -> 100000-165535".
func (m IDMap) Describe() []string {
	var out []string
	for _, x := range m.UID {
		out = append(out, fmt.Sprintf("%d-%d -> %d-%d", x.Inside, x.Inside+x.Count-1, x.Outside, x.Outside+x.Count-1))
	}
	return out
}

func procMaps(ms []Mapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, x := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: x.Inside, HostID: x.Outside, Size: x.Count}
	}
	return out
}

// Start starts cmd as uid 0 and gid 0 of a new user namespace with the map,
// with every capability inside it (which the program's own setup, such as
// bwrap's, then narrows). cmd.SysProcAttr may set other fields; its
// Cloneflags gain CLONE_NEWUSER. Where the maps are written by newuidmap,
// cmd runs through self (this binary: the reexec helper that waits for them)
// and must not use more than 16 ExtraFiles.
func (m IDMap) Start(cmd *exec.Cmd, self string) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	a.Cloneflags |= syscall.CLONE_NEWUSER
	if !m.helper {
		// Go writes the maps as the parent and the child becomes root
		// inside before it execs.
		a.UidMappings, a.GidMappings = procMaps(m.UID), procMaps(m.GID)
		a.GidMappingsEnableSetgroups = m.Full()
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: !m.Full()}
		return cmd.Start()
	}
	return m.startMapped(cmd, self)
}

// startMapped starts cmd through the wait helper, writes the maps with
// newuidmap and newgidmap, then lets the helper exec cmd: the child becomes
// root inside once its uid maps, and execs with a full capability set.
func (m IDMap) startMapped(cmd *exec.Cmd, self string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	// reexec.Env picks the wait helper, but cmd may use it for a helper of
	// its own (the landlock launcher is this binary too): that name travels
	// as an argument, and the wait helper puts it back before it execs.
	// A nil Env is the engine's, as exec.Cmd would pass it.
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	var own string
	cmd.Env = nil
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, reexec.Env+"="); ok {
			own = v
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, reexec.Env+"="+waitHelper)
	path := cmd.Path
	cmd.Args = append([]string{self, strconv.Itoa(fd), own, path}, cmd.Args...)
	cmd.Path = self
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	fail := func(err error) error {
		w.Close()
		cmd.Process.Kill()
		return err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, t := range []struct {
		tool string
		ms   []Mapping
	}{{"newuidmap", m.UID}, {"newgidmap", m.GID}} {
		args := []string{pid}
		for _, x := range t.ms {
			args = append(args, strconv.Itoa(x.Inside), strconv.Itoa(x.Outside), strconv.Itoa(x.Count))
		}
		if out, err := exec.Command(t.tool, args...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("writing the sandbox's id map with %s %s: %w: %s", t.tool, strings.Join(args, " "), err, strings.TrimSpace(string(out))))
		}
	}
	if _, err := w.Write([]byte{1}); err != nil {
		return fail(fmt.Errorf("releasing the sandbox's first process: %w", err))
	}
	return w.Close()
}

// waitHelper: FD HELPER PATH ARGV... — wait for a byte on FD, then exec
// PATH, with reexec.Env set to HELPER unless that is empty.
const waitHelper = "evalsi-userns-exec"

// holdHelper blocks until its stdin closes: the process whose namespace
// Namespace opens.
const holdHelper = "evalsi-userns-hold"

func init() {
	reexec.RegisterEarly(waitHelper, waitMain)
	reexec.RegisterEarly(holdHelper, func([]string) int {
		io.Copy(io.Discard, os.Stdin)
		return 0
	})
}

func waitMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "evalsi "+waitHelper+": want FD HELPER PATH ARGV...")
		return 125
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "evalsi "+waitHelper+": bad fd:", err)
		return 125
	}
	f := os.NewFile(uintptr(fd), "release")
	var b [1]byte
	if n, _ := f.Read(b[:]); n != 1 {
		return 125 // the parent gave up
	}
	f.Close()
	if args[1] != "" {
		os.Setenv(reexec.Env, args[1])
	}
	err = syscall.Exec(args[2], args[3:], os.Environ())
	fmt.Fprintf(os.Stderr, "evalsi %s: exec %s: %v\n", waitHelper, args[2], err)
	return 126
}

// Namespace returns a user namespace with the map, for idmapped mounts
// (IDMapMount); self is this binary (the reexec helper that holds it while
// it is opened). The caller closes it; the namespace lives as long as some
// descriptor or mount refers to it.
func (m IDMap) Namespace(self string) (*os.File, error) {
	cmd := exec.Command(self)
	cmd.Env = []string{reexec.Env + "=" + holdHelper}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// The holder needs no id inside: it stays the caller's uid, so it can
	// exec self wherever that is (root inside may not reach it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if !m.helper {
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = procMaps(m.UID), procMaps(m.GID)
		cmd.SysProcAttr.GidMappingsEnableSetgroups = m.Full()
		err = cmd.Start()
	} else {
		err = m.startMapped(cmd, self)
	}
	if err != nil {
		return nil, fmt.Errorf("creating a user namespace for idmapped mounts: %w", err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("opening the user namespace for idmapped mounts: %w", err)
	}
	return f, nil
}

// IDMapMount mounts src at dst (an existing directory), recursively and
// read-only, seen through ns's map: a file src stores as owned by id N
// appears owned by the host id N maps to (and by N inside ns). The mount
// is the caller's to unmount.
func IDMapMount(src, dst string, ns *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("idmapped mount of %s: open_tree: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("idmapped mount of %s: mount_setattr: %w (the filesystem may not support idmapped mounts)", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmapped mount of %s at %s: move_mount: %w", src, dst, err)
	}
	return nil
}

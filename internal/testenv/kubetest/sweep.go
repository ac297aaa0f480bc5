package kubetest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Each cluster takes a slot: a number N, held by an flock on <base>/N.lock
// for the test binary's lifetime (the kernel drops it when the process dies,
// however it dies). Everything the cluster makes on the host is named by N:
// its directory <base>/N, the bridge ektN, the pods' subnet 10.217.N.0/24, the
// cgroup /evalsi-kubetest-N. So a start that finds an unlocked slot with
// leftovers knows their owner is dead and sweeps them, and two test binaries
// never share names.
const maxSlots = 64

// slot is a held slot.
type slot struct {
	n    int
	lock *os.File
	dir  string
}

func (s slot) bridge() string     { return "ekt" + strconv.Itoa(s.n) }
func (s slot) cgroupRoot() string { return "/evalsi-kubetest-" + strconv.Itoa(s.n) }
func (s slot) nodeName() string   { return "evalsi-kt-" + strconv.Itoa(s.n) }
func (s slot) subnet() string     { return fmt.Sprintf("10.217.%d.0/24", s.n) }
func (s slot) gateway() string    { return fmt.Sprintf("10.217.%d.1", s.n) }

// baseDir is the well-known directory of the slots: short, because unix
// socket paths under it must stay under 108 bytes.
func baseDir() string {
	if os.Geteuid() == 0 {
		return filepath.Join(os.TempDir(), "evalsi-kubetest")
	}
	return filepath.Join(os.TempDir(), "evalsi-kubetest-"+strconv.Itoa(os.Geteuid()))
}

// takeSlot sweeps every slot whose owner is gone and keeps the first free one.
func takeSlot() (slot, error) {
	base := baseDir()
	if err := os.MkdirAll(base, 0o700); err != nil {
		return slot{}, fmt.Errorf("making the kubetest directory: %w", err)
	}
	var mine *slot
	for n := range maxSlots {
		// Lock files are made in order: past ours, a missing one ends
		// the scan.
		if _, err := os.Stat(lockPath(n)); mine != nil && os.IsNotExist(err) {
			break
		}
		s, ok, err := lockSlot(n)
		if err != nil {
			return slot{}, err
		}
		if !ok {
			continue // a live test binary's
		}
		if err := sweep(s); err != nil {
			s.lock.Close()
			return slot{}, fmt.Errorf("sweeping the leftovers of a dead test cluster in %s: %w", s.dir, err)
		}
		if mine == nil {
			mine = &s
			continue
		}
		s.lock.Close()
	}
	if mine == nil {
		return slot{}, fmt.Errorf("all %d kubetest slots in %s are held by running test binaries", maxSlots, base)
	}
	return *mine, nil
}

func lockPath(n int) string { return filepath.Join(baseDir(), strconv.Itoa(n)+".lock") }

// lockSlot takes slot n if no live process holds it.
func lockSlot(n int) (s slot, ok bool, err error) {
	// Lock files are never removed: a process holding an open lock file
	// that another removed would lock an orphaned inode.
	f, err := os.OpenFile(lockPath(n), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return slot{}, false, fmt.Errorf("opening a kubetest slot lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return slot{}, false, nil
		}
		return slot{}, false, fmt.Errorf("locking %s: %w", lockPath(n), err)
	}
	return slot{n: n, lock: f, dir: filepath.Join(baseDir(), strconv.Itoa(n))}, true, nil
}

// sweep removes everything a cluster in slot s made on the host: its
// processes (components, containerd's shims, the pods' processes), the mounts
// under its directory, its cgroups and bridge, its files. It is the teardown
// of a cluster that stopped cleanly too, so every step tolerates "already
// gone".
func sweep(s slot) error {
	if _, err := os.Stat(s.dir); os.IsNotExist(err) && !hasBridge(s.bridge()) && !hasCgroup(s.cgroupRoot()) {
		return nil
	}
	// Kill until nothing is left: a shim may start a process while we scan.
	for range 20 {
		if killAll(s) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	if err := unmountUnder(s.dir); err != nil {
		errs = append(errs, err)
	}
	removeCgroups(s.cgroupRoot())
	if hasBridge(s.bridge()) {
		if out, err := exec.Command("ip", "link", "delete", s.bridge()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing bridge %s: %v: %s", s.bridge(), err, out))
		}
	}
	removeLinksInto("/var/log/containers", s.dir)
	removeShimSockets(s.dir)
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", s.dir, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// killAll SIGKILLs every process of the slot and returns how many it
// signalled.
func killAll(s slot) int {
	pids := slotProcesses(s)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// slotProcesses lists the processes of the slot: those whose command line
// names its directory (components, containerd, shims) and those in its
// cgroups (pods).
func slotProcesses(s slot) []int {
	self := os.Getpid()
	victims := map[int]bool{}
	if entries, err := os.ReadDir("/proc"); err == nil {
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.Contains(string(cmdline), s.dir+"/") {
				victims[pid] = true
			}
		}
	}
	for _, h := range cgroupHierarchies() {
		filepath.WalkDir(filepath.Join(h, s.cgroupRoot()), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					victims[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(victims))
	for pid := range victims {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// unmountUnder detaches every mount at or below dir, deepest first
// (overlay rootfs, shm, netns bind mounts, the kubelet's volumes).
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var errs []string
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			errs = append(errs, fmt.Sprintf("unmounting %s: %v", mp, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space…).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers and
// the v2 unified one of a hybrid host).
func cgroupHierarchies() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var hs []string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fs := strings.Fields(post)
		fields := strings.Fields(pre)
		if len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") && len(fields) >= 5 {
			hs = append(hs, unescapeMount(fields[4]))
		}
	}
	return hs
}

func hasCgroup(root string) bool {
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, root)); err == nil {
			return true
		}
	}
	return false
}

// removeCgroups removes the cgroup tree at root in every hierarchy, leaves
// first (a cgroup directory is removed with rmdir, once empty of processes).
func removeCgroups(root string) {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		filepath.WalkDir(filepath.Join(h, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for range 50 { // a killed process leaves its cgroup a moment later
				if err := unix.Rmdir(dirs[i]); err == nil || err == unix.ENOENT {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

func hasBridge(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// removeLinksInto removes the symbolic links in dir that point below target
// (the kubelet links every container's log into /var/log/containers).
func removeLinksInto(dir, target string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, target+"/") {
			os.Remove(p)
		}
	}
}

// removeShimSockets removes the sockets of the containerd shims of the
// slot's tasks: containerd 1.6 puts them in /run/containerd/s, named by a
// hash of containerd's address, the namespace and the task, and a killed
// shim leaves its socket behind.
func removeShimSockets(dir string) {
	address := filepath.Join(dir, "node", "containerd.sock")
	tasks := filepath.Join(dir, "node", "containerd", "state", "io.containerd.runtime.v2.task")
	namespaces, _ := os.ReadDir(tasks)
	for _, ns := range namespaces {
		ids, _ := os.ReadDir(filepath.Join(tasks, ns.Name()))
		for _, id := range ids {
			sum := sha256.Sum256([]byte(filepath.Join(address, ns.Name(), id.Name())))
			os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
		}
	}
}

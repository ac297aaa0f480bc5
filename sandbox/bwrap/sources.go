package bwrap

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// viewsDir holds, for an engine running as root, the host paths bwrap binds
// into a sandbox, bind-mounted where bwrap can reach them while it sets
// up: bwrap runs as root of the sandbox's user namespace, an unprivileged id
// outside, which cannot traverse the engine's 0700 state directories (bwrap
// resolves every source by path, even one given as a descriptor). Each
// start's views are detached as soon as bwrap has cloned its sandbox, whose
// mount namespace keeps its own copies.
const viewsDir = "/run/evalsi-bwrap"

// sources are the host paths of what bwrap binds in.
type sources struct {
	root, tmp, shm, helper, empty, proxy string
	// etc is the directory of the sandbox's /etc files.
	etc string
	// release removes the views (a no-op without them).
	release func()
}

// bindSources returns the paths bwrap binds from: the real ones when bwrap
// can reach them (not root, or no user namespace of ours), else views of
// them in a directory of this start's own, owned by root inside.
func (s *Sandbox) bindSources(proxy string) (sources, error) {
	src := sources{root: s.root.Merged, tmp: s.tmp, shm: s.shm, helper: s.helper, etc: s.etc,
		empty: filepath.Join(s.stub, ".evalsi", "empty"), proxy: proxy, release: func() {}}
	if !s.inNS || os.Geteuid() != 0 {
		return src, nil
	}
	if err := s.rung.viewsDir(); err != nil {
		return src, err
	}
	dir := filepath.Join(s.rung.views, s.id+"-"+strconv.FormatInt(s.seq.Add(1), 10))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return src, fmt.Errorf("preparing bwrap's view of the sandbox: %w", err)
	}
	var mounted []string
	release := func() {
		for _, m := range mounted {
			unix.Unmount(m, unix.MNT_DETACH)
		}
		os.RemoveAll(dir)
	}
	if err := os.Chown(dir, s.hostUID, s.hostGID); err != nil {
		release()
		return src, fmt.Errorf("preparing bwrap's view of the sandbox: %w", err)
	}
	view := func(from *string, name string, isDir bool) error {
		if *from == "" {
			return nil
		}
		p := filepath.Join(dir, name)
		var err error
		if isDir {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err == nil {
			err = unix.Mount(*from, p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("preparing bwrap's view of %s: %w", *from, err)
		}
		mounted = append(mounted, p)
		*from = p
		return nil
	}
	for _, v := range []struct {
		p     *string
		name  string
		isDir bool
	}{{&src.root, "root", true}, {&src.tmp, "tmp", true}, {&src.shm, "shm", true}, {&src.helper, "evalsi", false}, {&src.empty, "empty", false}, {&src.proxy, "proxy.sock", false}, {&src.etc, "etc", true}} {
		if err := view(v.p, v.name, v.isDir); err != nil {
			release()
			return src, err
		}
	}
	src.release = release
	return src, nil
}

// viewsDir prepares viewsDir once per engine: a directory only root could
// have made, and a private mount, so that detaching a view from the host
// does not propagate into the sandbox whose namespace copied it. In it the
// engine makes a directory of its own, proc-PID-RAND, with a lock file it
// holds for life, and removes the directories of engines whose lock is
// free: an engine killed while a server was starting leaves its views
// mounted, and each lengthens the mount table every bwrap reads.
func (r *Rung) viewsDir() error {
	r.viewsOnce.Do(func() {
		r.viewsErr = func() error {
			if err := os.Mkdir(viewsDir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			// A symlink or another owner's directory here would redirect
			// the mounts.
			if st, err := os.Lstat(viewsDir); err != nil || !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != 0 {
				return fmt.Errorf("%s is not a directory owned by root (%v)", viewsDir, err)
			}
			if err := os.Chmod(viewsDir, 0o711); err != nil {
				return err
			}
			if ok, err := mountinfo.Mounted(viewsDir); err != nil {
				return err
			} else if !ok {
				if err := unix.Mount(viewsDir, viewsDir, "", unix.MS_BIND, ""); err != nil {
					return err
				}
			}
			if err := unix.Mount("", viewsDir, "", unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			sweepViews()
			own, err := os.MkdirTemp(viewsDir, fmt.Sprintf("proc-%d-", os.Getpid()))
			if err != nil {
				return err
			}
			if err := os.Chmod(own, 0o711); err != nil {
				return err
			}
			lock, err := os.OpenFile(filepath.Join(own, ".lock"), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return err
			}
			if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				lock.Close()
				return err
			}
			r.views, r.viewsLock = own, lock
			return nil
		}()
		if r.viewsErr != nil {
			r.viewsErr = fmt.Errorf("preparing %s, where bwrap finds what it binds into sandboxes: %w", viewsDir, r.viewsErr)
		}
	})
	return r.viewsErr
}

// sweepViews unmounts and removes the view directories of engines that are
// gone (their lock is free); a live engine's are never touched.
func sweepViews() {
	ents, err := os.ReadDir(viewsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "proc-") {
			continue
		}
		dir := filepath.Join(viewsDir, e.Name())
		lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // being made, or not ours
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			lock.Close()
			continue // its engine is alive
		}
		mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		// Deepest first, though views are not nested today.
		sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
		for _, m := range mounts {
			unix.Unmount(m.Mountpoint, unix.MNT_DETACH)
		}
		if err := os.RemoveAll(dir); err != nil {
			slog.Warn("removing a stopped engine's bwrap views", "dir", dir, "err", err)
		}
		lock.Close()
	}
}

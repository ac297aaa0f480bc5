package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	// release removes the views (a no-op without them).
	release func()
}

// bindSources returns the paths bwrap binds from: the real ones when bwrap
// can reach them (not root, or no user namespace of ours), else views of
// them in a directory of this start's own, owned by root inside.
func (s *Sandbox) bindSources(proxy string) (sources, error) {
	src := sources{root: s.root.Merged, tmp: s.tmp, shm: s.shm, helper: s.helper,
		empty: filepath.Join(s.stub, ".evalsi", "empty"), proxy: proxy, release: func() {}}
	if !s.inNS || os.Geteuid() != 0 {
		return src, nil
	}
	if err := s.rung.viewsDir(); err != nil {
		return src, err
	}
	dir := filepath.Join(viewsDir, s.id+"-"+strconv.FormatInt(s.seq.Add(1), 10))
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
	}{{&src.root, "root", true}, {&src.tmp, "tmp", true}, {&src.shm, "shm", true}, {&src.helper, "evalsi", false}, {&src.empty, "empty", false}, {&src.proxy, "proxy.sock", false}} {
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
// does not propagate into the sandbox whose namespace copied it.
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
			return unix.Mount("", viewsDir, "", unix.MS_PRIVATE, "")
		}()
		if r.viewsErr != nil {
			r.viewsErr = fmt.Errorf("preparing %s, where bwrap finds what it binds into sandboxes: %w", viewsDir, r.viewsErr)
		}
	})
	return r.viewsErr
}

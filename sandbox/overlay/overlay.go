// Package overlay assembles a sandbox's writable root from read-only layer
// directories: an overlayfs mount with a fresh upper directory when the
// engine may mount (root), otherwise a private copy. Snapshotting moves the
// upper directory out as a new layer, so restoring costs the same whatever
// the size of the layers below it.
package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"evals.si/sandbox/userns"
)

// Modes of a Root.
const (
	ModeOverlay = "overlay"
	ModeCopy    = "copy"
)

// Root is one sandbox's root filesystem.
type Root struct {
	// Merged is the directory to use as the sandbox's root.
	Merged string
	mode   string
	note   string
	upper  string
	state  string

	mu      sync.Mutex
	mounted bool
}

// Mount builds a root from lowers (topmost first) in stateDir, which must
// exist and be empty of the names upper, work, merged and root. It mounts
// overlayfs when running as root and falls back to copying the layers
// (noting why) otherwise or when the mount fails.
func Mount(lowers []string, stateDir string) (*Root, error) {
	return MountShifted(lowers, stateDir, Shift{})
}

// Shift presents layers the host owns to a sandbox in a user namespace
// whose root is another host id: without it, files owned by host root
// appear owned by nobody inside, and the sandbox's root could not change
// them.
type Shift struct {
	// Userns is a user namespace with the sandbox's id map. Lowers marked
	// in Layers are mounted through it (idmapped mounts: a file stored as
	// owned by id N appears owned by the host id N maps to), without
	// copying. Nil: no shift.
	Userns *os.File
	// Layers says which lowers (same indexes) hold ids as the sandbox sees
	// them (an unpacked image, a stub the host built), as opposed to
	// layers the sandbox wrote itself, whose files already carry host ids.
	Layers []bool
	// HostID maps an id as a shifted layer stores it to the host id it
	// appears as (uid, or gid when gid is set), for the copy fallback and
	// for the upper and work directories, which belong to root inside.
	HostID func(id int, gid bool) int
}

func (sh Shift) shifts(i int) bool { return sh.Userns != nil && i < len(sh.Layers) && sh.Layers[i] }

// MountShifted is Mount with lowers shifted as sh says.
func MountShifted(lowers []string, stateDir string, sh Shift) (*Root, error) {
	if len(lowers) == 0 {
		return nil, errors.New("building a sandbox root: no layers")
	}
	for _, l := range lowers {
		if st, err := os.Stat(l); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("building a sandbox root: layer %s is not a directory: %v", l, err)
		}
	}
	for _, n := range []string{"upper", "work", "merged", "root"} {
		if _, err := os.Lstat(filepath.Join(stateDir, n)); err == nil {
			return nil, fmt.Errorf("building a sandbox root: state dir %s already holds a root (%s exists); give each sandbox a fresh state dir", stateDir, n)
		}
	}
	r := &Root{state: stateDir}
	var why string
	if os.Geteuid() == 0 {
		err := r.mountOverlay(lowers, sh)
		if err == nil {
			return r, nil
		}
		why = err.Error()
	} else {
		why = "overlayfs needs root (the engine runs as uid " + fmt.Sprint(os.Geteuid()) + ")"
	}
	if err := r.copyLayers(lowers, sh); err != nil {
		return nil, fmt.Errorf("building a sandbox root by copy (overlay unavailable: %s): %w", why, err)
	}
	r.note = "root is a private copy of its layers (restore cost grows with image size): " + why
	return r, nil
}

func (r *Root) mountOverlay(lowers []string, sh Shift) error {
	r.upper = filepath.Join(r.state, "upper")
	work := filepath.Join(r.state, "work")
	merged := filepath.Join(r.state, "merged")
	for _, d := range []string{r.upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("preparing overlay: %w", err)
		}
		if sh.HostID != nil {
			if err := os.Chown(d, sh.HostID(0, false), sh.HostID(0, true)); err != nil {
				return fmt.Errorf("preparing overlay: %w", err)
			}
		}
	}
	abs := make([]string, len(lowers))
	// The idmapped views are needed only while overlayfs mounts: it keeps
	// private clones of its layers, so they are detached right after and
	// nothing is left to unmount at Remove.
	var views []string
	defer func() {
		for _, v := range views {
			unix.Unmount(v, unix.MNT_DETACH)
			os.Remove(v)
		}
	}()
	for i, l := range lowers {
		a, err := filepath.Abs(l)
		if err != nil {
			return err
		}
		if sh.shifts(i) {
			v := filepath.Join(r.state, fmt.Sprintf("lower%d", i))
			if err := os.Mkdir(v, 0o700); err != nil {
				return fmt.Errorf("preparing overlay: %w", err)
			}
			if err := userns.IDMapMount(a, v, sh.Userns); err != nil {
				os.Remove(v)
				return err
			}
			views = append(views, v)
			a = v
		}
		if strings.ContainsAny(a, ":,\\") {
			return fmt.Errorf("layer path %q contains ':', ',' or '\\', which overlayfs options cannot carry", a)
		}
		abs[i] = a
	}
	// index, redirect_dir and metacopy off: the upper directory must be a
	// self-contained layer once moved out and stacked over other lowers.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,redirect_dir=off,metacopy=off",
		strings.Join(abs, ":"), r.upper, work)
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("overlay options are %d bytes, over the kernel's page-size limit (too many or too long layer paths)", len(opts))
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		os.Remove(r.upper)
		os.Remove(work)
		os.Remove(merged)
		return fmt.Errorf("mounting overlayfs: %w", err)
	}
	r.Merged, r.mode, r.mounted = merged, ModeOverlay, true
	return nil
}

func (r *Root) copyLayers(lowers []string, sh Shift) error {
	root := filepath.Join(r.state, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	for i := len(lowers) - 1; i >= 0; i-- {
		var hostID func(int, bool) int
		if sh.Layers != nil && i < len(sh.Layers) && sh.Layers[i] {
			hostID = sh.HostID
		}
		if err := copyLayer(lowers[i], root, hostID); err != nil {
			return err
		}
	}
	if sh.HostID != nil && os.Geteuid() == 0 {
		if err := os.Lchown(root, sh.HostID(0, false), sh.HostID(0, true)); err != nil {
			return err
		}
	}
	r.Merged, r.upper, r.mode = root, root, ModeCopy
	return nil
}

// Mode is ModeOverlay or ModeCopy.
func (r *Root) Mode() string { return r.mode }

// Note says why the root is a copy ("" for overlay).
func (r *Root) Note() string { return r.note }

// Unmount unmounts the overlay; it is idempotent and a no-op for copies.
func (r *Root) Unmount() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mounted {
		return nil
	}
	if err := unix.Unmount(r.Merged, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		// Busy: detach lazily so Close never leaves a mount behind.
		if err2 := unix.Unmount(r.Merged, unix.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmounting overlay %s: %w", r.Merged, err)
		}
	}
	r.mounted = false
	return nil
}

// Snapshot unmounts the root and moves its changes (the upper directory, or
// the whole copy) to dest, which must not exist: a rename, constant-time
// whatever the size of the layers below, or, when dest is on another
// filesystem than the state directory, a copy of the changes. The root is
// unusable afterwards.
func (r *Root) Snapshot(dest string) error {
	if err := r.Unmount(); err != nil {
		return err
	}
	err := os.Rename(r.upper, dest)
	if errors.Is(err, unix.EXDEV) {
		// The changes live on a filesystem of their own (a disk_mb
		// tmpfs): the layer is a copy, at the cost of its size.
		if err = copyTree(r.upper, dest); err != nil {
			removeAll(dest)
		}
	}
	if err != nil {
		return fmt.Errorf("moving the sandbox's changes to layer %s: %w", dest, err)
	}
	r.upper = ""
	return nil
}

// Remove unmounts the root and deletes its state directory contents.
func (r *Root) Remove() error {
	if err := r.Unmount(); err != nil {
		return err
	}
	var errs []error
	for _, n := range []string{"upper", "work", "merged", "root"} {
		if err := removeAll(filepath.Join(r.state, n)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeAll removes a tree, making read-only directories writable first
// (a sandbox may have chmod'ed its files).
func removeAll(p string) error {
	if err := os.RemoveAll(p); err == nil {
		return nil
	}
	filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// RemoveTree unmounts every mount at or below dir, deepest first, and
// removes the tree. It is for state that no live sandbox uses any more, such
// as what a killed engine left behind: an overlay its process mounted stays
// in the host's mount table until something unmounts it. Unmounts are lazy
// (MNT_DETACH), so a mount still held open somewhere cannot block it.
func RemoveTree(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(abs))
	if err != nil {
		return fmt.Errorf("listing mounts below %s: %w", abs, err)
	}
	// Deeper mount points first; among equals, the later mount (on top).
	sort.Slice(mounts, func(i, j int) bool {
		if a, b := strings.Count(mounts[i].Mountpoint, "/"), strings.Count(mounts[j].Mountpoint, "/"); a != b {
			return a > b
		}
		return mounts[i].ID > mounts[j].ID
	})
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m.Mountpoint, err))
		}
	}
	if len(errs) > 0 {
		// Removing files through a mount that is still there would reach
		// into its layers.
		return errors.Join(errs...)
	}
	if err := removeAll(abs); err != nil {
		return fmt.Errorf("removing %s: %w", abs, err)
	}
	return nil
}

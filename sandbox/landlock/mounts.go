package landlock

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The launcher runs as root of a user namespace whose ids are not the
// host's, so it cannot walk host paths (a 0700 test directory, a root-owned
// state directory). Everything it mounts is handed to it as a descriptor
// instead, and attached below scratch, a tmpfs it mounts over /tmp in its
// private mount namespace (the host's /tmp is not needed there):
//   - engine as root: a detached clone of the directory, idmapped with the
//     sandbox's map (open_tree + mount_setattr), so files the host stores as
//     owned by id N appear owned by N inside — image roots, layers and the
//     sandbox's own state all stay stored unshifted, and a file the engine
//     writes as host root is root's inside;
//   - otherwise: the host path, which the launcher bind-mounts (its root is
//     the engine's uid, which owns the files; a descriptor from the engine's
//     mount namespace could not be bound in the launcher's).
const scratch = "/tmp"

// hostMount is a host directory the launcher needs.
type hostMount struct {
	name, path string
	ro         bool
}

// mountFD is a hostMount as the launcher receives it: a detached
// (idmapped) mount at descriptor FD to move_mount, or else Path to bind.
type mountFD struct {
	Name string `json:"name"`
	FD   int    `json:"fd,omitempty"`
	Path string `json:"path,omitempty"`
	RO   bool   `json:"ro,omitempty"`
}

// inScratch is where the launcher attaches the mount name, plus rel.
func inScratch(name string, rel ...string) string {
	return filepath.Join(append([]string{scratch, name}, rel...)...)
}

// openMounts opens the descriptors for ms; firstFD is the descriptor
// number the first will have in the launcher. userns is the sandbox's
// namespace to idmap with; nil passes paths instead.
func openMounts(ms []hostMount, userns *os.File, firstFD int) ([]*os.File, []mountFD, error) {
	var files []*os.File
	var out []mountFD
	fail := func(err error) ([]*os.File, []mountFD, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	for _, m := range ms {
		if userns == nil {
			out = append(out, mountFD{Name: m.name, Path: m.path, RO: m.ro})
			continue
		}
		fd, err := idmappedClone(m.path, userns, m.ro)
		if err != nil {
			return fail(fmt.Errorf("opening %s for the sandbox: %w", m.path, err))
		}
		out = append(out, mountFD{Name: m.name, FD: firstFD + len(files), RO: m.ro})
		files = append(files, os.NewFile(uintptr(fd), m.path))
	}
	return files, out, nil
}

// idmappedClone returns a detached copy of the mount tree at path seen
// through userns's id map (read-only when ro). Trees holding a submount
// that cannot be idmapped are cloned without their submounts.
func idmappedClone(path string, userns *os.File, ro bool) (int, error) {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	var lastErr error
	for _, rec := range []uint{unix.AT_RECURSIVE, 0} {
		fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|rec)
		if err != nil {
			return -1, fmt.Errorf("open_tree: %w", err)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|rec, &attr); err != nil {
			unix.Close(fd)
			lastErr = fmt.Errorf("idmapping (mount_setattr): %w (the filesystem may not support idmapped mounts)", err)
			continue
		}
		return fd, nil
	}
	return -1, lastErr
}

// attachMounts mounts the scratch tmpfs and attaches every descriptor at
// inScratch(name), closing them; the launcher runs it in its private mount
// namespace.
func attachMounts(ms []mountFD) error {
	// Paths are opened before scratch hides them (they may be below /tmp)
	// and bound from the descriptors, which are of this mount namespace.
	for i, m := range ms {
		if m.Path == "" {
			continue
		}
		fd, err := unix.Open(m.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", m.Path, err)
		}
		ms[i].FD = fd
	}
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mounting the launcher's scratch tmpfs at %s: %w", scratch, err)
	}
	for _, m := range ms {
		dst := inScratch(m.Name)
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		if m.Path == "" {
			err := unix.MoveMount(m.FD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
			unix.Close(m.FD)
			if err != nil {
				return fmt.Errorf("attaching %s (move_mount): %w", m.Name, err)
			}
			continue
		}
		err := unix.Mount("/proc/self/fd/"+strconv.Itoa(m.FD), dst, "", unix.MS_BIND|unix.MS_REC, "")
		unix.Close(m.FD)
		if err != nil {
			return fmt.Errorf("binding %s (%s): %w", m.Name, m.Path, err)
		}
		if m.RO {
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|lockedFlags(dst), ""); err != nil {
				return fmt.Errorf("making %s read-only: %w", m.Name, err)
			}
		}
	}
	return nil
}

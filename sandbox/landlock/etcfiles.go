package landlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// Every sandbox has /etc/hostname, /etc/hosts and /etc/resolv.conf as
// Docker writes a container's: the engine writes them into the state
// directory (etcDir) at Create, and the holder binds them over the root's
// paths in the sandbox's mount namespace, so they are per sandbox, writable
// by root inside as Docker's are, and never part of the overlay's upper
// directory (a snapshot) — a mount point the holder had to create there is
// removed again before a snapshot.

// etcFiles are the paths bound from etcDir, by file name.
var etcFiles = []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"}

// writeEtcFiles writes the sandbox's three files into dir and returns its
// hostname.
func writeEtcFiles(dir string) (string, error) {
	name, err := sandbox.NewHostname()
	if err != nil {
		return "", err
	}
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the host's /etc/resolv.conf: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for file, data := range map[string][]byte{
		"hostname":    []byte(name + "\n"),
		"hosts":       sandbox.EtcHosts(name),
		"resolv.conf": sandbox.ResolvConf(host),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return "", fmt.Errorf("writing the sandbox's /etc/%s: %w", file, err)
		}
	}
	return name, nil
}

// openEtcSources opens the holder's copies of the files (below scratch,
// before the pivot detaches it), by path in the root, as detached
// mounts.
func openEtcSources(dir string) (map[string]int, error) {
	fds := map[string]int{}
	for _, p := range etcFiles {
		// A detached bind mount: a plain descriptor could not be bound
		// once the pivot has detached the mount it is on.
		fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(dir, filepath.Base(p)), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("opening the sandbox's %s: %w", p, err)
		}
		fds[p] = fd
	}
	return fds, nil
}

// placeEtcFiles binds each source over its path; the holder runs it after
// the pivot, so the root is / and a symlink (resolv.conf often is one)
// resolves inside the sandbox. A missing file is created as the mount
// point, and returned so a snapshot can leave it out.
func placeEtcFiles(fds map[string]int) (created []string, err error) {
	for _, p := range etcFiles {
		fd := fds[p]
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, fmt.Errorf("making a mount point for %s: %w", p, err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return nil, fmt.Errorf("making a mount point for %s: %w", p, err)
			}
			f.Close()
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil, err
			}
			created = append(created, real)
		case err != nil:
			return nil, fmt.Errorf("placing %s: %w", p, err)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("placing %s: the image has a %s there, not a file", p, fi.Mode().Type())
		}
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("binding the sandbox's %s: %w", p, err)
		}
	}
	return created, nil
}

// removeMountPoint removes p (a path in the root) from the upper directory
// when it is still the empty file placeEtcFiles made. The sandbox may have
// replaced a directory on the way with a symlink since, so the path is
// resolved beneath upper without following any.
func removeMountPoint(upper, p string) error {
	root, err := unix.Open(upper, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	rel := strings.TrimPrefix(filepath.Dir(p), "/")
	if rel == "" {
		rel = "."
	}
	dir, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: directResolve,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
		return nil // no longer there as made
	}
	if err != nil {
		return fmt.Errorf("finding the mount point %s: %w", p, err)
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, filepath.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
		return nil
	}
	if err := unix.Unlinkat(dir, filepath.Base(p), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing the mount point %s: %w", p, err)
	}
	return nil
}

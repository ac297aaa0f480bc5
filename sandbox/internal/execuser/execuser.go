// Package execuser resolves who a command runs as from a docker exec -u
// spec ("name", "uid", "name:group", "uid:gid", ":group"…), for the rungs
// that resolve it themselves, inside the sandbox (bwrap's exec server,
// landlock's launcher).
//
// The rules are runc's GetExecUser, which docker exec uses, from the
// library runc's own package became (github.com/moby/sys/user). What this
// package adds is how the files are read: the sandbox's root writes them
// (an image, a setup step's useradd, the agent as root), so each must be a
// regular file, no larger than MaxFileSize, opened without blocking and
// without following a /proc magic link out of the sandbox's root.
package execuser

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/moby/sys/user"
	"golang.org/x/sys/unix"
)

// MaxFileSize bounds what is read of a passwd or group file; real ones are
// kilobytes.
const MaxFileSize = 16 << 20

// Lookup resolves spec against etc/passwd and etc/group, as docker exec -u
// does: a passwd entry gives the uid, primary gid and HOME (the first
// match wins; a numeric spec is a uid, never a name); a numeric uid without
// one runs with gid 0 and HOME=/; ":group" keeps root's entry; an explicit
// group replaces the primary gid and then there are no supplementary
// groups, otherwise they are the groups listing the user's name. A missing
// file has no entries. The caller is inside the sandbox's root (etc is
// "/etc" there), so the files are the sandbox's own.
//
// The errors are Docker's words ("unable to find user X: no matching
// entries in passwd file", "unable to find group Y: no matching entries in
// group file", "uids and gids must be in range 0-2147483647"), with the
// spec said where the library's words do not.
func Lookup(spec, etc string) (user.ExecUser, error) {
	passwd, err := readDB(filepath.Join(etc, "passwd"))
	if err != nil {
		return user.ExecUser{}, err
	}
	group, err := readDB(filepath.Join(etc, "group"))
	if err != nil {
		return user.ExecUser{}, err
	}
	// runc's defaults: root, HOME=/.
	u, err := user.GetExecUser(spec, &user.ExecUser{Home: "/"}, passwd, group)
	if errors.Is(err, user.ErrRange) {
		return user.ExecUser{}, fmt.Errorf("user %q: %w", spec, err)
	}
	if err != nil {
		return user.ExecUser{}, err
	}
	if u.Home == "" {
		// An entry without a home field: HOME=/ rather than empty.
		u.Home = "/"
	}
	return *u, nil
}

// readDB returns the file at path as a reader, or a nil io.Reader (which
// GetExecUser takes as no entries) when there is none. The sandbox's root
// owns the file, so it may be anything: a FIFO or a device (opened
// O_NONBLOCK, and refused before any read), a link into /proc — a magic
// link such as /proc/self/fd/N or /proc/self/exe reaches files outside the
// sandbox's root (refused by openat2), a plain one the kernel's view of a
// process, the reader's own environment included (refused by file system)
// — or something huge (refused by size, and never read past the bound).
func readDB(path string) (io.Reader, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	var fs unix.Statfs_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: %w", path, err)
	}
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: not a regular file (mode %#o); it must be a passwd-format file the image or a setup step wrote", path, st.Mode&unix.S_IFMT)
	case fs.Type == unix.PROC_SUPER_MAGIC || fs.Type == unix.SYSFS_MAGIC:
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: it is a kernel file (in /proc or /sys), not a user database", path)
	case st.Size > MaxFileSize:
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: %d bytes, more than the %d MiB a user database may have", path, st.Size, MaxFileSize>>20)
	}
	// The size can still grow while it is read: read one byte past the
	// bound to tell.
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("reading the sandbox's %s for a command's user: more than the %d MiB a user database may have", path, MaxFileSize>>20)
	}
	return bytes.NewReader(b), nil
}

package landlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"evals.si/sandbox"
)

// openAt2 opens rel below dirfd with resolve's rules.
func openAt2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (int, error) {
	name := strings.TrimPrefix(rel, "/")
	if name == "" {
		name = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	return unix.Openat2(dirfd, name, &how)
}

// reopenRegular reopens an O_PATH descriptor for I/O if it is a regular
// file. Reopening through /proc/self/fd reaches the same inode, so nothing
// can swap the file in between; a FIFO is never opened for I/O at all.
func reopenRegular(pathFD int, flags int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(pathFD, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, sandbox.NotRegular(sandbox.FileKind(st.Mode))
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pathFD), flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "file"), nil
}

// readAt reads the regular file rel below dirfd, at most max bytes.
func readAt(dirfd int, rel string, resolve uint64, max int64) ([]byte, error) {
	pfd, err := openAt2(dirfd, rel, unix.O_PATH, 0, resolve)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	f, err := reopenRegular(pfd, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("it is larger than the %d MiB read cap", max>>20)
	}
	return b, nil
}

// writeAt writes data to rel below dirfd, creating parent directories
// (0755) and the file (mode); an existing regular file is truncated and
// given mode, keeping its owner.
func writeAt(dirfd int, rel string, resolve uint64, data []byte, mode uint32) error {
	if rel == "" || rel == "/" || strings.HasSuffix(rel, "/") {
		return errors.New("not a file path")
	}
	if err := mkdirAllAt(dirfd, path.Dir(rel), resolve); err != nil {
		return fmt.Errorf("creating parent directories: %w", err)
	}
	var f *os.File
	for range 40 {
		pfd, err := openAt2(dirfd, rel, unix.O_PATH, 0, resolve)
		if err == nil {
			f, err = reopenRegular(pfd, unix.O_WRONLY|unix.O_TRUNC)
			unix.Close(pfd)
			if err != nil {
				return err
			}
			break
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		// O_EXCL: a dangling symlink or a file made meanwhile is not
		// followed or truncated here; the loop looks again.
		fd, err := openAt2(dirfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NONBLOCK, mode, resolve)
		if err == nil {
			f = os.NewFile(uintptr(fd), rel)
			break
		}
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
		// A dangling symlink: write where it points, as a shell's
		// redirection would, resolving the target again in the root.
		target, err := readlinkAt(dirfd, rel, resolve)
		if err != nil {
			continue // made meanwhile: look again
		}
		if resolve&unix.RESOLVE_NO_SYMLINKS != 0 {
			return unix.ELOOP
		}
		if path.IsAbs(target) {
			rel = target
		} else {
			rel = path.Join("/", path.Dir(rel), target)
		}
	}
	if f == nil {
		return errors.New("too many symlinks, or the path keeps changing")
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	// The mode given wins over the umask and an existing file's mode.
	if err := f.Chmod(os.FileMode(mode)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readlinkAt reads rel's target if rel is a symlink.
func readlinkAt(dirfd int, rel string, resolve uint64) (string, error) {
	fd, err := openAt2(dirfd, rel, unix.O_PATH|unix.O_NOFOLLOW, 0, resolve)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err // not a symlink (EINVAL/ENOENT)
	}
	return string(buf[:n]), nil
}

// mkdirAllAt creates dir below dirfd one component at a time, each
// resolved with resolve's rules.
func mkdirAllAt(dirfd int, dir string, resolve uint64) error {
	cur := "/"
	for _, name := range strings.Split(strings.Trim(dir, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		next := path.Join(cur, name)
		fd, err := openAt2(dirfd, next, unix.O_PATH|unix.O_DIRECTORY, 0, resolve)
		if err == nil {
			unix.Close(fd)
			cur = next
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		pfd, err := openAt2(dirfd, cur, unix.O_PATH|unix.O_DIRECTORY, 0, resolve)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, name, 0o755)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		cur = next
	}
	return nil
}

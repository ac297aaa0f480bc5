package execproto

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// The host's ReadFile and WriteFile are served here, inside the sandbox:
// paths resolve exactly as the sandbox's own commands see them (its root,
// its bind mounts, its /proc), so no symlink can lead to a host file, and
// what a write creates belongs to the sandbox's root (or its user), not to
// an id the user namespace does not map.
//
// Only regular files are read or written. The path is opened with O_PATH
// (which never blocks and has no side effects, whatever is there) and
// checked with fstat before the file is opened for real through
// /proc/self/fd, so a FIFO, socket or device at the path is refused instead
// of blocking the server or the host.

// FileMsg is one file operation (host → server, FrameFile).
type FileMsg struct {
	Write bool
	Path  string // absolute, in the sandbox
	Data  []byte
	Mode  uint32 // permission bits of a written file
	// Max: a read of a larger file fails.
	Max int
	// Chown: what a write creates (the file and missing parents) is
	// owned by UID:GID instead of the server's root.
	Chown    bool
	UID, GID int
}

// FileResult answers a FileMsg (server → host, FrameFileResult).
type FileResult struct {
	Data []byte
	// Errno is the failing system call's error number (0 when the
	// failure is not one), so the host can tell "no such file".
	Errno int
	Err   string // empty on success
}

const (
	oPath  = 0x200000 // O_PATH (the same on amd64 and arm64)
	procFD = "/proc/self/fd/"
)

// AsError is the result's failure as an error (nil on success): the
// errno itself when the failing call had one, so callers can tell
// fs.ErrNotExist, with the server's words around it.
func (r FileResult) AsError() error {
	switch {
	case r.Err == "":
		return nil
	case r.Errno != 0:
		if msg := syscall.Errno(r.Errno).Error(); r.Err != msg {
			return fmt.Errorf("%s: %w", strings.TrimSuffix(r.Err, ": "+msg), syscall.Errno(r.Errno))
		}
		return syscall.Errno(r.Errno)
	}
	return errors.New(r.Err)
}

func (sv *server) file(id uint32, m FileMsg) {
	var res FileResult
	var err error
	if m.Write {
		err = writeFile(m)
	} else {
		res.Data, err = readFile(m.Path, m.Max)
	}
	if err != nil {
		res.Err = err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			res.Errno = int(errno)
		}
	}
	sv.sendMsg(FrameFileResult, id, res)
}

// openRegular opens p for flags after checking, through an O_PATH
// descriptor, that it is a regular file of an ordinary file system. The
// server may hold more than the sandbox's commands (in a guest, every
// capability; its own /proc/self): magic links (/proc/self/fd/N, exe,
// root) are not followed, and kernel files are refused, since the path is
// the sandbox's to choose: /proc/kmsg, for one, is a regular file whose
// read blocks until the kernel logs.
func openRegular(p string, flags int) (*os.File, error) {
	pfd, err := openPath(p)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(pfd)
	var st syscall.Stat_t
	if err := syscall.Fstat(pfd, &st); err != nil {
		return nil, err
	}
	if err := regular(st); err != nil {
		return nil, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(pfd, &fs); err != nil {
		return nil, err
	}
	if pseudoFS[fs.Type] {
		return nil, errors.New("a kernel file (in /proc, /sys or another pseudo file system), not a file of the sandbox's: refused")
	}
	fd, err := syscall.Open(procFD+strconv.Itoa(pfd), flags|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// pseudoFS are the file systems whose files are the kernel's views, by
// statfs magic: proc, sysfs, cgroup v1 and v2, debugfs, tracefs,
// securityfs, bpf, pstore, efivarfs, configfs.
var pseudoFS = map[int64]bool{
	0x9fa0: true, 0x62656572: true, 0x27e0eb: true, 0x63677270: true, 0x64626720: true,
	0x74726163: true, 0x73636673: true, 0xcafe4a11: true, 0x6165676c: true, 0xde5e81e4: true, 0x62656570: true,
}

// openPath is an O_PATH descriptor of p that did not go through a magic
// link (openat2 RESOLVE_NO_MAGICLINKS; syscall has no openat2).
func openPath(p string) (int, error) {
	b, err := syscall.BytePtrFromString(p)
	if err != nil {
		return -1, err
	}
	how := struct{ flags, mode, resolve uint64 }{flags: oPath | syscall.O_CLOEXEC, resolve: resolveNoMagiclinks}
	dirfd := atFDCWD
	for {
		fd, _, e := syscall.Syscall6(sysOpenat2, uintptr(dirfd), uintptr(unsafe.Pointer(b)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case syscall.EINTR, syscall.EAGAIN:
			continue
		}
		return -1, e
	}
}

const (
	sysOpenat2          = 437 // the same on amd64 and arm64
	atFDCWD             = -100
	resolveNoMagiclinks = 0x02
)

func regular(st syscall.Stat_t) error {
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return nil
	case syscall.S_IFDIR:
		return syscall.EISDIR
	case syscall.S_IFIFO:
		return errors.New("a named pipe (FIFO), not a regular file: refused")
	case syscall.S_IFSOCK:
		return errors.New("a socket, not a regular file: refused")
	default:
		return errors.New("a device, not a regular file: refused")
	}
}

func readFile(p string, max int) ([]byte, error) {
	f, err := openRegular(p, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("larger than the %d MiB a file read may return", max>>20)
	}
	return b, nil
}

func writeFile(m FileMsg) error {
	if err := mkdirAll(path.Dir(m.Path), m); err != nil {
		return fmt.Errorf("creating parent directories: %w", err)
	}
	f, err := openRegular(m.Path, syscall.O_WRONLY|syscall.O_TRUNC)
	created := false
	if errors.Is(err, syscall.ENOENT) {
		// O_NOFOLLOW|O_EXCL: a dangling symlink there is refused, not
		// followed to create its target.
		var fd int
		fd, err = syscall.Open(m.Path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, m.Mode&0o7777)
		if err == nil {
			f, created = os.NewFile(uintptr(fd), m.Path), true
		}
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(m.Data); err != nil {
		return err
	}
	// The mode given wins over the umask and over an existing file's.
	if err := f.Chmod(os.FileMode(m.Mode & 0o777)); err != nil {
		return err
	}
	if created && m.Chown {
		if err := f.Chown(m.UID, m.GID); err != nil {
			return err
		}
	}
	return f.Close()
}

// mkdirAll creates dir's missing components, owned as m says.
func mkdirAll(dir string, m FileMsg) error {
	cur := "/"
	for _, name := range strings.Split(strings.Trim(dir, "/"), "/") {
		if name == "" {
			continue
		}
		cur = path.Join(cur, name)
		err := syscall.Mkdir(cur, 0o755)
		if errors.Is(err, syscall.EEXIST) {
			continue
		}
		if err != nil {
			return err
		}
		if m.Chown {
			if err := os.Lchown(cur, m.UID, m.GID); err != nil {
				return err
			}
		}
	}
	return nil
}

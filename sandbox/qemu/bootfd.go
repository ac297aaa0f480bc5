package qemu

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// QEMU 7.2 reads -kernel and -initrd with fopen and g_file_get_contents,
// which know nothing of /dev/fdset, so QEMU gets them as descriptors it
// names by /proc/self/fd/N. Reopening a file through /proc/self/fd checks
// the file's own permissions, so the descriptor cannot be the cache's file
// (it may be root's, 0600): it is a sealed memfd holding a copy, which any
// user may open read-only and nobody may change. Not a hard link or a copy
// in the machine's directory: a link needs the file readable by QEMU's
// user and on the same filesystem, and either needs a directory QEMU can
// reach by path, which the machine's (the engine's, 0700, holding logs
// the engine writes) must not be. The copies are kept per file, so every
// machine of a kernel shares one (its pages are counted once), made the
// first time a machine boots it.

// maxBootFiles bounds the copies kept: a rung boots one kernel and one
// initramfs, two after an upgrade of its boot files.
const maxBootFiles = 4

type bootKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// bootFiles keeps sealed memfd copies of boot files.
type bootFiles struct {
	mu    sync.Mutex
	files map[bootKey]*os.File
	order []bootKey // oldest first
}

// open returns a read-only descriptor of a sealed copy of path, the
// caller's to close.
func (b *bootFiles) open(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	key := bootKey{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(sys.Dev), sys.Ino
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.files[key]
	if !ok {
		if f, err = sealedCopy(src, st.Size(), filepath.Base(path)); err != nil {
			return nil, fmt.Errorf("copying %s into memory for qemu: %w", path, err)
		}
		if b.files == nil {
			b.files = map[bootKey]*os.File{}
		}
		b.files[key] = f
		b.order = append(b.order, key)
		if len(b.order) > maxBootFiles {
			// Machines running on it keep their own descriptor.
			b.files[b.order[0]].Close()
			delete(b.files, b.order[0])
			b.order = b.order[1:]
		}
	}
	// A duplicate: the cached one may be closed by an eviction before the
	// caller's QEMU has inherited it.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the copy of %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// sealedCopy copies size bytes of src into a memfd, seals it against any
// change, and returns a read-only descriptor of it.
func sealedCopy(src io.Reader, size int64, name string) (*os.File, error) {
	fd, err := unix.MemfdCreate("evalsi-qemu:"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	rw := os.NewFile(uintptr(fd), "memfd:"+name)
	defer rw.Close()
	n, err := io.Copy(rw, src)
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("read %d bytes of %d: the file changed while it was copied", n, size)
	}
	if _, err := unix.FcntlInt(rw.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		return nil, fmt.Errorf("sealing the memfd: %w", err)
	}
	// A new open file description, read-only: QEMU's descriptor cannot
	// write even what the seals would let through.
	ro, err := os.Open("/proc/self/fd/" + strconv.Itoa(int(rw.Fd())))
	if err != nil {
		return nil, fmt.Errorf("reopening the memfd read-only (is /proc mounted?): %w", err)
	}
	return ro, nil
}

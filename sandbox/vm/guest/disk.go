package guest

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// disk_mb in a guest: the root disk is the sandbox's own, so what a
// sandbox may write is the disk's free space. At setup the guest reserves
// all of it but DiskMB in one file, allocated (not sparse) and immutable:
// changing or removing an immutable file needs CAP_LINUX_IMMUTABLE, which
// no command holds, so the reserve stays whatever a command does as root.
// A full disk after a command is a disk denial.

// reservePath is the reserve file; its directory is made for it.
const reservePath = "/.evalsi-reserve/disk"

// fsImmutableFL is FS_IMMUTABLE_FL (linux/fs.h), which x/sys lacks.
const fsImmutableFL = 0x10

// reserveDisk leaves mb MiB free on the filesystem of /.
func reserveDisk(mb int) error {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return fmt.Errorf("disk_mb: reading the root disk's free space: %w", err)
	}
	free := int64(st.Bavail) * st.Bsize
	keep := int64(mb) << 20
	if free <= keep {
		return nil // the disk has no more room than disk_mb
	}
	if err := os.MkdirAll("/.evalsi-reserve", 0o700); err != nil {
		return fmt.Errorf("disk_mb: %w", err)
	}
	f, err := os.OpenFile(reservePath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("disk_mb: creating the reserve: %w", err)
	}
	defer f.Close()
	// Rounded down to whole blocks, minus a little for the metadata the
	// allocation itself takes.
	size := (free - keep - 4<<20) &^ (st.Bsize - 1)
	if size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
			return fmt.Errorf("disk_mb: reserving %d bytes: %w", size, err)
		}
	}
	flags := 0
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FS_IOC_GETFLAGS, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return fmt.Errorf("disk_mb: reading the reserve's flags: %w", e)
	}
	flags |= fsImmutableFL
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return fmt.Errorf("disk_mb: making the reserve immutable: %w", e)
	}
	// The directory too, so nothing is renamed over or into it.
	d, err := os.Open("/.evalsi-reserve")
	if err != nil {
		return fmt.Errorf("disk_mb: %w", err)
	}
	defer d.Close()
	dflags := 0
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, d.Fd(), unix.FS_IOC_GETFLAGS, uintptr(unsafe.Pointer(&dflags))); e == 0 {
		dflags |= fsImmutableFL
		unix.Syscall(unix.SYS_IOCTL, d.Fd(), unix.FS_IOC_SETFLAGS, uintptr(unsafe.Pointer(&dflags)))
	}
	return nil
}

// diskFull describes a root disk with no room left ("" when it has some).
func diskFull(mb int) string {
	if mb <= 0 {
		return ""
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return ""
	}
	if int64(st.Bavail)*st.Bsize >= 1<<20 {
		return ""
	}
	return fmt.Sprintf("the root disk is full: disk_mb %d MB are written", mb)
}

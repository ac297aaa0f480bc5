package limits

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Disk bounds the bytes a sandbox's writable state may hold: a tmpfs of
// that size (and a proportional number of inodes) at Dir, on which the rung
// puts the root's upper and work directories, /tmp and /dev/shm. A write
// past it fails with ENOSPC. A tmpfs is memory: its pages are charged to
// the memory cgroup of the process that wrote them, so under memory_mb a
// command's files count against its memory too.
type Disk struct {
	Dir string
	MB  int
}

// inodesPerMB bounds the tmpfs's inodes (each costs kernel memory that
// size= does not count): one per 4 KiB, ext4's default ratio for small
// filesystems, so millions of empty files cannot get past the bound.
const inodesPerMB = 256

// MountDisk mounts a tmpfs of mb MB at dir (created if missing), its root
// directory owned by uid:gid. It needs root.
func MountDisk(dir string, mb, uid, gid int) (*Disk, error) {
	if mb <= 0 {
		return nil, fmt.Errorf("disk_mb %d: want a positive size", mb)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("preparing the disk_mb filesystem: %w", err)
	}
	opts := fmt.Sprintf("size=%dm,nr_inodes=%d,mode=0755,uid=%d,gid=%d", mb, max(mb*inodesPerMB, 1024), uid, gid)
	if err := unix.Mount("evalsi-disk", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("mounting a %d MB tmpfs at %s for disk_mb (needs root): %w", mb, dir, err)
	}
	return &Disk{Dir: dir, MB: mb}, nil
}

// Full says whether the filesystem has no room left for data or for new
// files, and how much it holds: the trace a write refused with ENOSPC
// leaves (tmpfs fills a short write up to the last page first). A
// command that fills it and deletes what it wrote before it ends, or a
// single allocation that fails whole (fallocate), leaves none.
func (d *Disk) Full() (full bool, detail string, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return false, "", fmt.Errorf("checking the disk_mb filesystem %s: %w", d.Dir, err)
	}
	used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
	switch {
	case st.Bavail == 0:
		return true, fmt.Sprintf("the sandbox's writable layer is full (%d MB of disk_mb=%d): writes fail with ENOSPC", used>>20, d.MB), nil
	case st.Ffree == 0:
		return true, fmt.Sprintf("the sandbox's writable layer has no inodes left (%d files; disk_mb=%d): creating files fails with ENOSPC", st.Files, d.MB), nil
	}
	return false, "", nil
}

// Unmount detaches the filesystem (lazily if busy) and removes Dir; what
// it held is gone.
func (d *Disk) Unmount() error {
	if err := unix.Unmount(d.Dir, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		if err := unix.Unmount(d.Dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting the disk_mb filesystem %s: %w", d.Dir, err)
		}
	}
	if err := os.Remove(d.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", d.Dir, err)
	}
	return nil
}

// Describe renders the bound for an isolation report.
func (d *Disk) Describe() string { return fmt.Sprintf("disk=%dMB", d.MB) }

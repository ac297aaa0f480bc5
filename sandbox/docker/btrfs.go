package docker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs quota groups through the kernel's ioctls (linux/btrfs.h), for the
// btrfs storage driver's container subvolumes: a limit on a subvolume's
// exclusive bytes (what it holds that its image does not) and a read of
// its usage. Docker's own size option on this driver limits referenced
// bytes, which count the image too, so a 64 MB bound would refuse a
// container of a 100 MB image its first write.

// ioctl numbers: _IOR/_IOWR(BTRFS_IOCTL_MAGIC 0x94, nr, size).
const (
	btrfsIocQgroupLimit = 2<<30 | 48<<16 | 0x94<<8 | 43   // struct btrfs_ioctl_qgroup_limit_args
	btrfsIocTreeSearch  = 3<<30 | 4096<<16 | 0x94<<8 | 17 // struct btrfs_ioctl_search_args
	btrfsIocInoLookup   = 3<<30 | 4096<<16 | 0x94<<8 | 18 // struct btrfs_ioctl_ino_lookup_args

	btrfsQgroupLimitMaxExcl = 1 << 1
	btrfsQuotaTreeObjectID  = 8
	btrfsQgroupInfoKey      = 242
	btrfsFirstFreeObjectID  = 256
)

type btrfsQgroupLimitArgs struct {
	QgroupID uint64 // 0: the subvolume the ioctl is made on
	Flags    uint64
	MaxRfer  uint64
	MaxExcl  uint64
	RsvRfer  uint64
	RsvExcl  uint64
}

type btrfsSearchKey struct {
	TreeID                   uint64
	MinObjectID, MaxObjectID uint64
	MinOffset, MaxOffset     uint64
	MinTransID, MaxTransID   uint64
	MinType, MaxType         uint32
	NrItems                  uint32
	_                        uint32
	_                        [4]uint64
}

type btrfsSearchArgs struct {
	Key btrfsSearchKey
	Buf [4096 - unsafe.Sizeof(btrfsSearchKey{})]byte
}

type btrfsInoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [4080]byte
}

func btrfsIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// btrfsLimitExclusive sets the quota group limit of the subvolume at dir
// to max exclusive bytes. It needs quotas enabled on the filesystem.
func btrfsLimitExclusive(dir string, max uint64) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	args := btrfsQgroupLimitArgs{Flags: btrfsQgroupLimitMaxExcl, MaxExcl: max}
	err = btrfsIoctl(fd, btrfsIocQgroupLimit, unsafe.Pointer(&args))
	if errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w (quotas are not enabled on that btrfs filesystem: btrfs quota enable MOUNTPOINT)", err)
	}
	return err
}

// btrfsExclusive reports the bytes only the subvolume at dir holds, after
// committing the filesystem's transaction: btrfs brings quota group
// counters up to date at commit, so without it a command's last writes
// would not be counted yet.
func btrfsExclusive(dir string) (uint64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return 0, fmt.Errorf("syncfs: %w", err)
	}
	look := btrfsInoLookupArgs{ObjectID: btrfsFirstFreeObjectID}
	if err := btrfsIoctl(fd, btrfsIocInoLookup, unsafe.Pointer(&look)); err != nil {
		return 0, fmt.Errorf("finding the subvolume's id: %w", err)
	}
	// The level-0 quota group of a subvolume has the subvolume's id; its
	// info item is keyed (0, QGROUP_INFO, id) in the quota tree.
	var args btrfsSearchArgs
	args.Key = btrfsSearchKey{
		TreeID:    btrfsQuotaTreeObjectID,
		MinOffset: look.TreeID, MaxOffset: look.TreeID,
		MaxTransID: ^uint64(0),
		MinType:    btrfsQgroupInfoKey, MaxType: btrfsQgroupInfoKey,
		NrItems: 1,
	}
	if err := btrfsIoctl(fd, btrfsIocTreeSearch, unsafe.Pointer(&args)); err != nil {
		return 0, fmt.Errorf("reading quota group 0/%d: %w", look.TreeID, err)
	}
	if args.Key.NrItems == 0 {
		return 0, fmt.Errorf("quota group 0/%d has no usage record (are quotas enabled?)", look.TreeID)
	}
	// Search header (transid, objectid, offset u64; type, len u32), then
	// btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl, excl_cmpr.
	const hdr = 32
	if n := binary.LittleEndian.Uint32(args.Buf[28:32]); n < 40 {
		return 0, fmt.Errorf("quota group 0/%d: short usage record (%d bytes)", look.TreeID, n)
	}
	return binary.LittleEndian.Uint64(args.Buf[hdr+24 : hdr+32]), nil
}

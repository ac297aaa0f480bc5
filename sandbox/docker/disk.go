package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
)

// disk_mb (Limits.DiskMB) bounds the bytes a container's writable layer
// may hold beyond its image, with the storage driver's filesystem quota:
//
//   - overlay2: Docker's size storage option, which the daemon honours only
//     with its data root on xfs mounted with pquota (project quotas);
//   - btrfs: the rung limits the container's subvolume to that many
//     exclusive bytes (btrfs.go) before it starts; the daemon must run on
//     this machine and the filesystem have quotas enabled.
//
// Any other driver, or a daemon that cannot, fails Create with what to
// configure: the bound is never silently dropped. Writes past it fail with
// EDQUOT or ENOSPC. After each command the rung looks at the layer's
// usage (statfs of the upper directory, which xfs answers with the
// project's quota, or the btrfs quota group): a layer within diskSlack of
// its bound is a disk denial. A command that fills the layer and deletes
// what it wrote before it ends, or a single write refused whole
// (fallocate), leaves no trace.
//
// On btrfs a subvolume made inside the layer would have a quota group of
// its own, outside the limit: the containers' seccomp profile refuses the
// ioctls that make them (seccomp.go).

// diskSlack is how close to its bound a full layer's usage is: a refused
// write fails at most its own size short of the bound, and writers (dd,
// cp, shells) write in chunks of a MiB or less.
const diskSlack = 1 << 20

// diskBound watches a container's bounded writable layer.
type diskBound interface {
	// full describes a layer with no room left, "" while it has room.
	full() (string, error)
	describe() string
}

// diskOptions checks that the daemon can bound a container's writable
// layer to mb MiB, and sets what the container is created with.
func (f *daemonFacts) diskOptions(mb int, readOnlyRoot bool, hcfg *container.HostConfig) error {
	switch f.driver {
	case "overlay2":
		if f.backingFS != "" && f.backingFS != "xfs" {
			return f.diskError(mb, fmt.Sprintf("its overlay2 data root %s is on %s, not xfs", f.rootDir, f.backingFS))
		}
		hcfg.StorageOpt = map[string]string{"size": fmt.Sprintf("%dm", mb)}
	case "btrfs":
		if _, err := os.Stat(filepath.Join(f.rootDir, "btrfs", "subvolumes")); err != nil {
			return f.diskError(mb, fmt.Sprintf("its btrfs data root %s is not on this machine (the rung sets each container's quota on the host): %v", f.rootDir, err))
		}
	default:
		return f.diskError(mb, fmt.Sprintf("its storage driver is %q", f.driver))
	}
	if readOnlyRoot {
		// The workdir and /tmp of a read-only root are volumes, which the
		// layer's quota does not cover.
		return fmt.Errorf("disk_mb %d with read_only_root is not supported on the docker rung: the writable workdir and /tmp are volumes outside the writable layer's quota; leave one of them unset, or use the bwrap rung", mb)
	}
	return nil
}

func (f *daemonFacts) diskError(mb int, why string) error {
	return fmt.Errorf("disk_mb %d: the docker daemon at %s cannot bound a container's writable layer: %s; "+
		"configure its data root on xfs mounted with pquota (storage driver overlay2), or on btrfs with quotas enabled (storage driver btrfs, as .ci/setup does), or leave disk_mb unset",
		mb, f.host, why)
}

// createError explains a ContainerCreate refused for the size option.
func (f *daemonFacts) createError(mb int, err error) error {
	if msg := err.Error(); strings.Contains(msg, "storage-opt") || strings.Contains(msg, "quota") {
		return f.diskError(mb, msg)
	}
	return err
}

// boundDisk applies and watches the bound of a created (not yet started)
// container.
func (f *daemonFacts) boundDisk(ctx context.Context, cli *client.Client, id string, mb int) (diskBound, error) {
	limit := uint64(mb) << 20
	switch f.driver {
	case "btrfs":
		// The container's layer is a subvolume named by its mount id.
		mountID, err := os.ReadFile(filepath.Join(f.rootDir, "image", "btrfs", "layerdb", "mounts", id, "mount-id"))
		if err != nil {
			return nil, fmt.Errorf("disk_mb: finding container %s's btrfs subvolume: %w", short(id), err)
		}
		dir := filepath.Join(f.rootDir, "btrfs", "subvolumes", strings.TrimSpace(string(mountID)))
		if err := btrfsLimitExclusive(dir, limit); err != nil {
			return nil, fmt.Errorf("disk_mb: limiting btrfs subvolume %s to %d MiB: %w", dir, mb, err)
		}
		return &btrfsDisk{dir: dir, mb: mb}, nil
	default:
		in, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("disk_mb: inspecting container %s: %w", short(id), err)
		}
		upper := in.GraphDriver.Data["UpperDir"]
		if _, err := os.Stat(upper); upper == "" || err != nil {
			return &statfsDisk{mb: mb}, nil // a remote daemon: bounded, not watched
		}
		return &statfsDisk{dir: upper, mb: mb}, nil
	}
}

type btrfsDisk struct {
	dir string
	mb  int
}

func (d *btrfsDisk) full() (string, error) {
	used, err := btrfsExclusive(d.dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil // removed with its container
		}
		return "", fmt.Errorf("checking disk_mb usage of %s: %w", d.dir, err)
	}
	if used+diskSlack < uint64(d.mb)<<20 {
		return "", nil
	}
	return fmt.Sprintf("the sandbox's writable layer is full (%d MiB of disk_mb=%d): writes fail with EDQUOT (Disk quota exceeded)", used>>20, d.mb), nil
}

func (d *btrfsDisk) describe() string {
	return fmt.Sprintf("disk_mb: the container's writable layer (a btrfs subvolume) holds at most %d MiB beyond its image (quota group exclusive limit; writes past it fail with EDQUOT); /dev/shm is Docker's 64 MiB tmpfs, counted as memory; a layer within 1 MiB of the bound after a command is a disk denial; "+
		"creating btrfs subvolumes or snapshots (which would have quota groups of their own) is refused by the seccomp profile", d.mb)
}

type statfsDisk struct {
	dir string // "" when the daemon's files are not on this machine
	mb  int
}

func (d *statfsDisk) full() (string, error) {
	if d.dir == "" {
		return "", nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", fmt.Errorf("checking disk_mb usage of %s: %w", d.dir, err)
	}
	used := (st.Blocks - st.Bfree) * uint64(st.Bsize)
	switch {
	case st.Bavail*uint64(st.Bsize) < diskSlack:
		return fmt.Sprintf("the sandbox's writable layer is full (%d MiB of disk_mb=%d): writes fail with ENOSPC", used>>20, d.mb), nil
	case st.Ffree == 0:
		return fmt.Sprintf("the sandbox's writable layer has no inodes left (disk_mb=%d): creating files fails with ENOSPC", d.mb), nil
	}
	return "", nil
}

func (d *statfsDisk) describe() string {
	s := fmt.Sprintf("disk_mb: the container's writable layer holds at most %d MiB (overlay2 size option, an xfs project quota; writes past it fail with ENOSPC); /dev/shm is Docker's 64 MiB tmpfs, counted as memory", d.mb)
	if d.dir == "" {
		return s + "; the daemon's files are not on this machine, so a full layer is not reported as a denial"
	}
	return s + "; a layer within 1 MiB of the bound after a command is a disk denial"
}

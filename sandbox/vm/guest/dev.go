package guest

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Commands get the /dev a container has (Docker's, as runc makes it), not
// the guest's devtmpfs, which holds the raw root disk (vda), the serial
// console the host logs to a file (ttyS0, console: a command could flood
// it), the control port (vport*), mem, kmsg and the rest. commandDev
// mounts a tmpfs over the devtmpfs and bind-mounts the few nodes into it
// from the devtmpfs below, which stays reachable only through the init's
// own descriptor (devfd: the control port is opened through it) and the
// descriptors it opened before (the console). The tmpfs is nodev, as is
// every other place a command can write (the root disk, /tmp, /dev/shm):
// a node a command makes with CAP_MKNOD (Docker's default set keeps it)
// opens nothing. Each bind-mounted node is a mount of its own, with the
// devtmpfs mount's flags, so it opens.

// devNodes are the device nodes a container's /dev has.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are its symlinks (name → target).
var devLinks = [][2]string{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	{"ptmx", "pts/ptmx"},
}

// ttyGID is the group of the pseudo-terminals devpts makes: Debian's (and
// Docker's) tty group.
const ttyGID = 5

// commandDev replaces /dev (the devtmpfs, open as devfd) with a
// container's.
func commandDev(dev string, devfd int) error {
	// Docker's sizes: 64 MiB for /dev and for /dev/shm.
	if err := mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("the commands' /dev: %w", err)
	}
	lower := "/proc/self/fd/" + strconv.Itoa(devfd) + "/"
	for _, n := range devNodes {
		p := dev + "/" + n
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("the commands' /dev: %w", err)
		}
		f.Close()
		if err := mount(lower+n, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("the commands' /dev: %w", err)
		}
	}
	for _, d := range []struct {
		name, fstype string
		mode         os.FileMode
		flags        uintptr
		data         string
	}{
		// newinstance: the guest's own pseudo-terminals are not among
		// the commands' (it has none; a container's are its own).
		{"pts", "devpts", 0o755, unix.MS_NOSUID | unix.MS_NOEXEC, fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,gid=%d", ttyGID)},
		{"shm", "tmpfs", 0o1777, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "mode=1777,size=65536k"},
		{"mqueue", "mqueue", 0o755, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	} {
		p := dev + "/" + d.name
		if err := os.Mkdir(p, d.mode); err != nil {
			return fmt.Errorf("the commands' /dev: %w", err)
		}
		if err := mount(d.fstype, p, d.fstype, d.flags, d.data); err != nil {
			return fmt.Errorf("the commands' /dev: %w", err)
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[1], dev+"/"+l[0]); err != nil {
			return fmt.Errorf("the commands' /dev: %w", err)
		}
	}
	return nil
}

// Command bootprobe is a stand-in /init for sandbox/vm's boot test: it
// does what evalsi-guest must do with the initramfs BuildInitramfs writes
// (load /modules.list in order, mount the ext4 root disk RootDisk made) and
// reports on the console, then powers the machine off.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Println("PROBE FAIL:", err)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

func run() error {
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	// The virtio_mmio.device= arguments QEMU or Firecracker add are the
	// module's parameters once it is not built in.
	var mmio []string
	for _, a := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(a, "virtio_mmio."); ok {
			mmio = append(mmio, v)
		}
	}
	list, err := os.ReadFile("/modules.list")
	if err != nil {
		return err
	}
	var loaded []string
	for _, p := range strings.Fields(string(list)) {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		params := ""
		if strings.HasSuffix(p, "/virtio_mmio.ko") {
			params = strings.Join(mmio, " ")
		}
		err = unix.FinitModule(int(f.Fd()), params, 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("finit_module %s: %w", p, err)
		}
		loaded = append(loaded, p[strings.LastIndex(p, "/")+1:])
	}
	fmt.Println("PROBE MODULES", strings.Join(loaded, " "))
	var st unix.Stat_t
	for i := 0; unix.Stat("/dev/vda", &st) != nil; i++ {
		if i > 200 {
			return fmt.Errorf("no /dev/vda after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := unix.Mount("/dev/vda", "/newroot", "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount /dev/vda: %w", err)
	}
	data, err := os.ReadFile("/newroot/hello")
	if err != nil {
		return err
	}
	// A write, so the disk is shown writable (the overlay takes it).
	if err := os.WriteFile("/newroot/written", []byte("by the guest"), 0o644); err != nil {
		return err
	}
	if err := unix.Unmount("/newroot", 0); err != nil {
		return err
	}
	fmt.Printf("PROBE OK %s\n", strings.TrimSpace(string(data)))
	return nil
}

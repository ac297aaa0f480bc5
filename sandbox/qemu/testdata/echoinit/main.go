// Command echoinit is the test guest's /init: it loads the modules listed
// in /modules.list (in order, giving virtio_mmio the virtio_mmio.device=
// arguments QEMU appends to the kernel command line), opens the virtio
// serial port named by evalsi.control=virtio-serial:NAME, writes one line
// saying what it found, then echoes every byte the host writes. With
// echoinit.flood=N on the command line it also writes N bytes to its
// console (the serial port ttyS0), between a "flood begins" and a "flood
// ends" line, while it echoes. With echoinit.peek=1 each disk in the
// line also says its first 16 bytes (name:sectors:ro=R:head=HEX), and
// with echoinit.stamp=DEV:TEXT it first writes TEXT at offset 4096 of
// /dev/DEV and syncs it. It is built by the qemu package's tests; it is
// not the product's guest.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil {
			fail("mount %s: %v", m.dst, err)
		}
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	var mmio []string
	port := ""
	flood := 0
	peek, stamp := false, ""
	for _, a := range strings.Fields(string(cmdline)) {
		if a == "echoinit.peek=1" {
			peek = true
		}
		if v, ok := strings.CutPrefix(a, "echoinit.stamp="); ok {
			stamp = v
		}
		if v, ok := strings.CutPrefix(a, "echoinit.flood="); ok {
			flood, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(a, "virtio_mmio."); ok {
			mmio = append(mmio, v)
		}
		if v, ok := strings.CutPrefix(a, "evalsi.control=virtio-serial:"); ok {
			port = v
		}
	}
	list, _ := os.ReadFile("/modules.list")
	for _, m := range strings.Fields(string(list)) {
		params := ""
		if strings.HasSuffix(m, "/virtio_mmio.ko") || m == "virtio_mmio.ko" {
			params = strings.Join(mmio, " ")
		}
		if !strings.HasPrefix(m, "/") {
			m = "/" + m
		}
		if err := load(m, params); err != nil {
			fail("%v", err)
		}
	}
	if port == "" {
		fail("no evalsi.control=virtio-serial:NAME on the command line %q", cmdline)
	}
	dev := ""
	for start := time.Now(); dev == "" && time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			if n, _ := os.ReadFile("/sys/class/virtio-ports/" + e.Name() + "/name"); strings.TrimSpace(string(n)) == port {
				dev = "/dev/" + e.Name()
			}
		}
	}
	if dev == "" {
		fail("no virtio port named %q", port)
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		fail("%v", err)
	}
	if dev, text, ok := strings.Cut(stamp, ":"); ok {
		if err := writeAt("/dev/"+dev, []byte(text), 4096); err != nil {
			fail("stamp: %v", err)
		}
	}
	var blocks []string
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		// name:sectors:ro=0|1, so the host can tell its disks apart.
		size, _ := os.ReadFile("/sys/block/" + e.Name() + "/size")
		ro, _ := os.ReadFile("/sys/block/" + e.Name() + "/ro")
		b := fmt.Sprintf("%s:%s:ro=%s", e.Name(), strings.TrimSpace(string(size)), strings.TrimSpace(string(ro)))
		if peek {
			head := make([]byte, 16)
			if d, err := os.Open("/dev/" + e.Name()); err == nil {
				d.ReadAt(head, 0)
				d.Close()
			}
			b += fmt.Sprintf(":head=%x", head)
		}
		blocks = append(blocks, b)
	}
	rng, _ := os.ReadFile("/sys/class/misc/hw_random/rng_current")
	hello := fmt.Sprintf("hello blocks=%s rng=%s\n", strings.Join(blocks, ","), strings.TrimSpace(string(rng)))
	fmt.Print("echoinit: ", hello)
	if flood > 0 {
		go floodConsole(flood)
	}
	if _, err := f.Write([]byte(hello)); err != nil {
		fail("write %s: %v", dev, err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				fmt.Println("echoinit: write:", err)
			}
			continue
		}
		// 0 bytes (or an error) while the host side is not connected,
		// around a save and restore: wait for the next host.
		if err != nil {
			fmt.Println("echoinit: read:", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// floodConsole writes n bytes of numbered lines to the console.
func floodConsole(n int) {
	start := time.Now()
	w := bufio.NewWriterSize(os.Stdout, 4096)
	fmt.Fprintln(w, "echoinit: flood begins")
	var b []byte
	for i := 0; n > 0; i++ {
		b = fmt.Appendf(b[:0], "echoinit: flood line %d, a guest writing its console as fast as it can\n", i)
		b = b[:min(len(b), n)]
		w.Write(b)
		n -= len(b)
	}
	fmt.Fprintf(w, "echoinit: flood ends after %s\n", time.Since(start).Round(time.Millisecond))
	w.Flush()
}

// writeAt writes p at off of the device path and syncs it.
func writeAt(path string, p []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		return err
	}
	return f.Sync()
}

func load(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("loading %s: %w", path, err)
	}
	return nil
}

func fail(format string, args ...any) {
	fmt.Printf("echoinit: "+format+"\n", args...)
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

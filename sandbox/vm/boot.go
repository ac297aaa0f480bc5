package vm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// BootFiles are what a machine boots from: the kernel, the initramfs
// PrepareBoot built for it and the kernel's release.
type BootFiles struct {
	Kernel, Initrd, Release string
}

// guestModules are the drivers evalsi-guest needs, for kernels that have
// them as modules (Debian's): the virtio-mmio transport both VMMs' devices
// sit on, the root disk and its filesystem, the QEMU rung's virtio-serial
// control port, entropy for the guest's RNG, and Firecracker's vsock. A
// kernel with a driver built in needs no file for it.
func guestModules() []string {
	return []string{"virtio_mmio", "virtio_blk", "virtio_console", "crc32c_generic", "ext4", "virtio_rng", "vmw_vsock_virtio_transport"}
}

// initramfsFormat names the layout BuildInitramfs writes; changing the
// layout (or guestModules) changes it, so caches built by older code are
// not reused.
const initramfsFormat = "evalsi-initramfs-1"

// KernelRelease returns the release (uname -r) of a kernel image: a
// bzImage, from the version string its x86 boot header points to, or an
// uncompressed vmlinux ELF (Firecracker's kind), from its "Linux version"
// banner.
func KernelRelease(kernel string) (string, error) {
	f, err := os.Open(kernel)
	if err != nil {
		return "", fmt.Errorf("guest kernel: %w", err)
	}
	defer f.Close()
	var hdr [0x210]byte
	n, err := io.ReadFull(f, hdr[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("guest kernel %s: %w", kernel, err)
	}
	switch {
	case n >= 0x210 && string(hdr[0x202:0x206]) == "HdrS":
		// The boot protocol's kernel_version field (0x20e) is an offset
		// from the end of the 512-byte boot sector to a NUL-terminated
		// "6.1.0-57-amd64 (debian-kernel@...) #1 SMP ..." string.
		off := int64(binary.LittleEndian.Uint16(hdr[0x20e:])) + 0x200
		if off == 0x200 {
			return "", fmt.Errorf("guest kernel %s: its bzImage header has no kernel version string", kernel)
		}
		var v [256]byte
		m, err := f.ReadAt(v[:], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("guest kernel %s: reading its version string: %w", kernel, err)
		}
		s, _, _ := strings.Cut(string(v[:m]), "\x00")
		rel, _, _ := strings.Cut(strings.TrimSpace(s), " ")
		if rel == "" {
			return "", fmt.Errorf("guest kernel %s: its bzImage version string at %#x is empty", kernel, off)
		}
		return rel, nil
	case n >= 4 && string(hdr[:4]) == "\x7fELF":
		rel, err := bannerRelease(f)
		if err != nil {
			return "", fmt.Errorf("guest kernel %s: %w", kernel, err)
		}
		return rel, nil
	}
	return "", fmt.Errorf("guest kernel %s is neither an x86 bzImage (no HdrS boot header at 0x202) nor an uncompressed vmlinux ELF: give the VMM's kernel image (vmlinuz or vmlinux), not an initrd or a compressed vmlinux.gz", kernel)
}

// bannerRelease finds "Linux version RELEASE " in a vmlinux, which the
// kernel keeps as linux_banner. It reads in chunks, keeping an overlap so a
// banner across two chunks is still found; the first occurrence followed by
// a digit is taken, since the banner's prefix also appears in format
// strings.
func bannerRelease(r io.ReaderAt) (string, error) {
	const banner = "Linux version "
	// tail is the most a release string may need after the banner; a
	// chunk's last overlap bytes are read again with the next chunk.
	const tail = 128
	const overlap = len(banner) + tail
	buf := make([]byte, 1<<20)
	var off int64
	carry := 0
	for {
		n, err := r.ReadAt(buf[carry:], off)
		data := buf[:carry+n]
		for i := 0; ; {
			j := bytes.Index(data[i:], []byte(banner))
			if j < 0 {
				break
			}
			start := i + j + len(banner)
			end := bytes.IndexAny(data[start:], " \x00")
			if end < 0 && err == nil && len(data)-start < tail {
				break // cut by the chunk's end: found again next round
			}
			if end < 0 {
				end = len(data) - start
			}
			if rel := string(data[start : start+end]); rel != "" && rel[0] >= '0' && rel[0] <= '9' {
				return rel, nil
			}
			i = start
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "", fmt.Errorf(`it is an ELF file without a "Linux version" banner (not a Linux kernel?)`)
			}
			return "", err
		}
		off += int64(n)
		carry = min(overlap, len(data))
		copy(buf, data[len(data)-carry:])
	}
}

// ModulesDir returns the modules directory of a kernel of the given
// release: lib/modules/RELEASE beside the kernel's boot directory (the
// layout scripts/build-vm-kernel.sh unpacks, and a distribution's own
// /boot), else /lib/modules/RELEASE, else "" for a kernel without modules
// (one with its drivers built in, as Firecracker's documented vmlinux).
func ModulesDir(kernel, release string) string {
	for _, d := range []string{
		filepath.Join(filepath.Dir(kernel), "..", "lib", "modules", release),
		filepath.Join("/lib/modules", release),
	} {
		if st, err := os.Stat(filepath.Join(d, "kernel")); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// BuildInitramfs writes to dst (a cpio newc archive, uncompressed since
// the guest unpacks it faster so under emulation) the initramfs of a guest
// of kernel: /init (guestBinary, 0755), /dev/console, the modules the
// guest loads under /lib/modules/RELEASE/ and /modules.list, their paths
// one per line in load order. A kernel without a modules directory gets an
// empty list: its drivers are assumed built in.
func BuildInitramfs(ctx context.Context, dst, guestBinary, kernel string) error {
	release, err := KernelRelease(kernel)
	if err != nil {
		return err
	}
	var mods []Module
	mdir := ModulesDir(kernel, release)
	if mdir != "" {
		if mods, err = ResolveModules(mdir, guestModules()); err != nil {
			return fmt.Errorf("initramfs for %s: %w", kernel, err)
		}
	}
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := writeInitramfs(ctx, out, guestBinary, release, mdir, mods); err != nil {
		out.Close()
		os.Remove(dst)
		return fmt.Errorf("initramfs %s for %s: %w", dst, kernel, err)
	}
	// Synced before PrepareBoot's rename, so a crash cannot leave a
	// cached initramfs that is named but empty.
	err = out.Sync()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

func writeInitramfs(ctx context.Context, out io.Writer, guestBinary, release, mdir string, mods []Module) error {
	bw := bufio.NewWriterSize(out, 1<<20)
	c := NewCPIOWriter(bw)
	// Mount points evalsi-guest uses, so it need not create them on a
	// filesystem it is about to leave.
	for _, d := range []string{"dev", "proc", "sys", "tmp", "newroot"} {
		if err := c.Dir(d, 0o755); err != nil {
			return err
		}
	}
	// The kernel opens /dev/console for init's standard streams before
	// any devtmpfs exists; without the node init runs with none, and its
	// messages never reach the serial console.
	if err := c.CharDevice("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := addFile(c, "init", 0o755, guestBinary); err != nil {
		return err
	}
	var list strings.Builder
	for _, m := range mods {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join("lib/modules", release, m.Path))
		if err := addFile(c, name, 0o644, filepath.Join(mdir, m.Path)); err != nil {
			return err
		}
		list.WriteString("/" + name + "\n")
	}
	if err := c.File("modules.list", 0o644, int64(list.Len()), strings.NewReader(list.String())); err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func addFile(c *CPIOWriter, name string, perm fs.FileMode, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	return c.File(name, perm, st.Size(), f)
}

// PrepareBoot returns the boot files of a guest running the evalsi-guest
// binary guest on kernel, building the initramfs into cacheDir unless a
// previous call (of this process or another) did. The cache key is the
// content of the kernel and of guest (a rebuilt guest of the same mtime
// still gets a new initramfs), with the modules directory's path and the
// initramfs's format. The file appears whole, by rename: a concurrent
// caller sees it complete or not at all, and two that race both build the
// same bytes.
func PrepareBoot(ctx context.Context, cacheDir, kernel, guest string) (BootFiles, error) {
	kernel, err := filepath.Abs(kernel)
	if err != nil {
		return BootFiles{}, fmt.Errorf("guest kernel: %w", err)
	}
	release, err := KernelRelease(kernel)
	if err != nil {
		return BootFiles{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", initramfsFormat, ModulesDir(kernel, release))
	for _, p := range []string{kernel, guest} {
		if err := hashFile(h, p); err != nil {
			return BootFiles{}, fmt.Errorf("boot files: %w", err)
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:32]
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return BootFiles{}, fmt.Errorf("boot files cache: %w", err)
	}
	bf := BootFiles{Kernel: kernel, Release: release, Initrd: filepath.Join(cacheDir, "initramfs-"+key+".cpio")}
	if _, err := os.Stat(bf.Initrd); err == nil {
		return bf, nil
	}
	tmp, err := os.CreateTemp(cacheDir, ".initramfs-*.tmp")
	if err != nil {
		return BootFiles{}, fmt.Errorf("boot files cache: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := BuildInitramfs(ctx, tmp.Name(), guest, kernel); err != nil {
		return BootFiles{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return BootFiles{}, fmt.Errorf("boot files cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), bf.Initrd); err != nil {
		return BootFiles{}, fmt.Errorf("boot files cache: %w", err)
	}
	return bf, nil
}

func hashFile(h io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	// The length first, so two files' bytes cannot be shifted between
	// them to give the same key.
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%d\n", st.Size())
	_, err = io.Copy(h, f)
	return err
}

package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"evals.si/internal/testenv"
)

func TestKernelRelease(t *testing.T) {
	kernel, mdir := testKernel(t)
	release := filepath.Base(mdir)
	vmlinux := extractVmlinux(t, kernel)
	notKernel := filepath.Join(t.TempDir(), "text")
	os.WriteFile(notKernel, []byte("not a kernel at all"), 0o644)
	tests := []struct {
		name, path, want, wantErr string
	}{
		{name: "bzImage", path: kernel, want: release},
		{name: "vmlinux ELF", path: vmlinux, want: release},
		{name: "an ELF that is not a kernel", path: filepath.Join(mdir, "kernel/drivers/virtio/virtio.ko"), wantErr: `without a "Linux version" banner`},
		{name: "a text file", path: notKernel, wantErr: "neither an x86 bzImage"},
		{name: "a missing file", path: filepath.Join(t.TempDir(), "vmlinuz"), wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KernelRelease(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
					t.Fatalf("KernelRelease = %q, %v; want an error naming %s and saying %q", got, err, tt.path, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("KernelRelease = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// extractVmlinux unpacks the ELF vmlinux inside a bzImage (Debian's is
// xz-compressed), the kind of kernel Firecracker boots.
func extractVmlinux(t *testing.T, bzImage string) string {
	t.Helper()
	if _, err := exec.LookPath("xz"); err != nil {
		testenv.Missing(t, "xz", "needed to unpack the vmlinux inside the test kernel (install xz-utils)")
	}
	data, err := os.ReadFile(bzImage)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("\xfd7zXZ\x00"))
	if i < 0 {
		t.Fatalf("%s has no xz payload", bzImage)
	}
	out := filepath.Join(t.TempDir(), "vmlinux")
	cmd := exec.Command("sh", "-c", "xz -dc --single-stream > "+out)
	cmd.Stdin = bytes.NewReader(data[i:])
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("xz: %v: %s", err, msg)
	}
	return out
}

// TestBannerReleaseAcrossChunks puts the banner at and around the reader's
// 1 MiB chunk boundary, and after decoys a real banner must not be
// confused with.
func TestBannerReleaseAcrossChunks(t *testing.T) {
	const chunk = 1 << 20
	const banner = "Linux version 6.1.0-test-amd64 (builder@host) #1 SMP\x00"
	for _, at := range []int{0, 100, chunk - 200, chunk - 140, chunk - 100, chunk - 20, chunk - 14, chunk - 3, chunk, chunk + 5, 3*chunk - 7} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			data := make([]byte, 3*chunk+100)
			// A format string with the banner's prefix, which is not it.
			copy(data[10:], "Linux version %s\x00")
			if at < 30 {
				data = data[30:]
				at = 0
			}
			copy(data[at:], banner)
			got, err := bannerRelease(bytes.NewReader(data))
			if err != nil || got != "6.1.0-test-amd64" {
				t.Fatalf("bannerRelease = %q, %v; want 6.1.0-test-amd64", got, err)
			}
		})
	}
}

func TestModulesDir(t *testing.T) {
	kernel, mdir := testKernel(t)
	release := filepath.Base(mdir)
	// A kernel alone in a directory, of a release the host has no
	// modules for, has none.
	alone := filepath.Join(t.TempDir(), "vmlinux")
	os.WriteFile(alone, nil, 0o644)
	// The bundle layout elsewhere.
	bundle := t.TempDir()
	os.MkdirAll(filepath.Join(bundle, "boot"), 0o755)
	os.MkdirAll(filepath.Join(bundle, "lib/modules/9.9.9-test/kernel"), 0o755)
	tests := []struct {
		name, kernel, release, want string
	}{
		{"the cached bundle", kernel, release, filepath.Clean(mdir)},
		{"a bundle elsewhere", filepath.Join(bundle, "boot/vmlinuz-9.9.9-test"), "9.9.9-test", filepath.Join(bundle, "lib/modules/9.9.9-test")},
		{"no modules", alone, "0.0.0-none", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ModulesDir(tt.kernel, tt.release); got != tt.want {
				t.Fatalf("ModulesDir = %q, want %q", got, tt.want)
			}
		})
	}
}

// fakeGuest writes a file standing in for evalsi-guest where only its
// bytes matter.
func fakeGuest(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "evalsi-guest")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildInitramfs(t *testing.T) {
	kernel, mdir := testKernel(t)
	guest := fakeGuest(t, "guest binary\n")
	dst := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := BuildInitramfs(context.Background(), dst, guest, kernel); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]cpioEntry{}
	for _, e := range readCPIO(t, data) {
		if _, dup := entries[e.Name]; dup {
			t.Errorf("%s is in the archive twice", e.Name)
		}
		entries[e.Name] = e
	}
	if e := entries["init"]; e.Mode != syscall.S_IFREG|0o755 || e.Data != "guest binary\n" {
		t.Errorf("init: mode %o, %q; want the guest binary, 0755", e.Mode, e.Data)
	}
	if e, ok := entries["dev/console"]; !ok || e.Mode != syscall.S_IFCHR|0o600 || e.RMajor != 5 || e.RMinor != 1 {
		t.Errorf("dev/console: %+v, want a character device 5:1", e)
	}
	mods, err := ResolveModules(mdir, guestModules())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range mods {
		name := filepath.Join("lib/modules", filepath.Base(mdir), m.Path)
		want = append(want, "/"+name)
		src, err := os.ReadFile(filepath.Join(mdir, m.Path))
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := entries[name]; !ok || e.Data != string(src) || e.Mode != syscall.S_IFREG|0o644 {
			t.Errorf("%s: missing, or not a copy of %s (mode %o)", name, m.Path, e.Mode)
		}
	}
	if got := entries["modules.list"].Data; got != strings.Join(want, "\n")+"\n" {
		t.Errorf("modules.list:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	t.Run("a missing guest leaves no file", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "initramfs.cpio")
		err := BuildInitramfs(context.Background(), dst, filepath.Join(t.TempDir(), "none"), kernel)
		if err == nil || !strings.Contains(err.Error(), "none") {
			t.Fatalf("err = %v, want one naming the missing guest", err)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Fatalf("%s exists after a failed build", dst)
		}
	})
}

func TestPrepareBootCache(t *testing.T) {
	kernel, _ := testKernel(t)
	ctx := context.Background()
	cache := t.TempDir()
	guest := fakeGuest(t, "guest one")
	first, err := PrepareBoot(ctx, cache, kernel, guest)
	if err != nil {
		t.Fatal(err)
	}
	if first.Kernel != kernel || first.Release == "" || filepath.Dir(first.Initrd) != cache {
		t.Fatalf("PrepareBoot = %+v", first)
	}
	st1, err := os.Stat(first.Initrd)
	if err != nil {
		t.Fatal(err)
	}

	again, err := PrepareBoot(ctx, cache, kernel, guest)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(again.Initrd)
	if again != first || !os.SameFile(st1, st2) {
		t.Errorf("the second call rebuilt the initramfs: %+v then %+v", first, again)
	}

	// The same name and mtime with other bytes is another guest.
	mtime := time.Unix(1_700_000_000, 0)
	os.Chtimes(guest, mtime, mtime)
	os.WriteFile(guest, []byte("guest two"), 0o755)
	os.Chtimes(guest, mtime, mtime)
	other, err := PrepareBoot(ctx, cache, kernel, guest)
	if err != nil {
		t.Fatal(err)
	}
	if other.Initrd == first.Initrd {
		t.Fatalf("a changed guest binary reused the initramfs %s", first.Initrd)
	}
	if e := cpioFile(t, other.Initrd, "init"); e != "guest two" {
		t.Errorf("the new initramfs's init is %q", e)
	}
	if e := cpioFile(t, first.Initrd, "init"); e != "guest one" {
		t.Errorf("the first initramfs changed: init is %q", e)
	}
}

// TestPrepareBootConcurrent starts callers together on an empty cache:
// each gets the same, complete file, and no temporary file is left.
func TestPrepareBootConcurrent(t *testing.T) {
	kernel, _ := testKernel(t)
	cache := t.TempDir()
	guest := fakeGuest(t, strings.Repeat("g", 5<<20))
	const n = 6
	var wg sync.WaitGroup
	res := make([]BootFiles, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = PrepareBoot(context.Background(), cache, kernel, guest)
			if errs[i] == nil {
				// Read at once: a half-written file would show here.
				if got := cpioFile(t, res[i].Initrd, "init"); len(got) != 5<<20 {
					errs[i] = fmt.Errorf("caller %d read an init of %d bytes", i, len(got))
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res[i] != res[0] {
			t.Errorf("caller %d got %+v, caller 0 %+v", i, res[i], res[0])
		}
	}
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want only the initramfs", names)
	}
}

func cpioFile(t *testing.T, archive, name string) string {
	t.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range readCPIO(t, data) {
		if e.Name == name {
			return e.Data
		}
	}
	t.Fatalf("%s has no %s", archive, name)
	return ""
}

// TestBootFilesBootInQEMU boots the initramfs and a root disk in QEMU's
// microvm machine (under TCG where there is no KVM), with a stand-in init
// (testdata/bootprobe) that loads /modules.list in order and mounts and
// writes the ext4 root disk through a qcow2 overlay: the kernel, not only
// this package's reader, accepts what BuildInitramfs, RootDisk and Overlay
// write.
func TestBootFilesBootInQEMU(t *testing.T) {
	kernel, _ := testKernel(t)
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testenv.Missing(t, "qemu-system-x86_64", "install qemu-system-x86")
	}
	needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	probe := filepath.Join(dir, "bootprobe")
	build := exec.CommandContext(ctx, "go", "build", "-o", probe, "./testdata/bootprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe init: %v: %s", err, out)
	}
	bf, err := PrepareBoot(ctx, filepath.Join(dir, "boot"), kernel, probe)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "hello"), []byte("from the root disk\n"), 0o644)
	base, err := RootDisk(ctx, filepath.Join(dir, "disks"), "probe", root, 8)
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "vda.qcow2")
	if err := Overlay(ctx, base, "raw", overlay); err != nil {
		t.Fatal(err)
	}
	accel := "tcg"
	consoleLog := filepath.Join(dir, "console.log")
	cmd := exec.CommandContext(ctx, qemu, "-M", "microvm,isa-serial=on", "-accel", accel, "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", bf.Kernel, "-initrd", bf.Initrd, "-append", "console=ttyS0 panic=-1 loglevel=4"+tscKHz(t),
		// The console goes to a file, as the rungs keep it (console.log).
		"-serial", "file:"+consoleLog,
		"-drive", "id=d0,file="+overlay+",format=qcow2,if=none", "-device", "virtio-blk-device,drive=d0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("qemu ran %s", time.Since(start).Round(time.Millisecond))
	log, _ := os.ReadFile(consoleLog)
	console := string(log) + out.String()
	if err != nil || !strings.Contains(console, "PROBE OK from the root disk") {
		t.Fatalf("qemu: %v; the probe did not report success. Console:\n%s", err, tail(console, 4000))
	}
	for _, l := range strings.Split(console, "\n") {
		if strings.HasPrefix(l, "PROBE MODULES") {
			t.Log(strings.TrimSpace(l))
		}
	}
	// The guest's write went to the overlay, not the cached base.
	if got := debugfsCat(t, base, "/written"); got != "" {
		t.Errorf("the base image has the guest's write %q", got)
	}
	raw := filepath.Join(dir, "after.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", overlay, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	if got := debugfsCat(t, raw, "/written"); got != "by the guest" {
		t.Errorf("the overlay holds %q at /written, want the guest's write", got)
	}
}

// tscKHz returns a tsc_early_khz= kernel argument with the host's TSC
// rate, which the guest's TSC runs at under TCG. Without it the guest
// calibrates the TSC against QEMU's emulated PIT, which on a loaded (or
// itself virtual) host fails now and then; the kernel then marks the TSC
// unstable, has no other clock on the microvm machine, and hangs early in
// boot with its clock at 0.000000.
func tscKHz(t *testing.T) string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil && mhz > 0 {
				return fmt.Sprintf(" tsc_early_khz=%d", int64(mhz*1000))
			}
		}
	}
	t.Log("no cpu MHz in /proc/cpuinfo: the guest calibrates its TSC itself")
	return ""
}

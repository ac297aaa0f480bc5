package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

func TestParseControl(t *testing.T) {
	tests := []struct {
		cmdline string
		want    Control
		err     string
	}{
		{"console=ttyS0 evalsi.control=virtio-serial:evalsi.0 panic=-1", Control{Kind: "virtio-serial", Name: "evalsi.0"}, ""},
		{"evalsi.control=vsock:1024", Control{Kind: "vsock", Port: 1024}, ""},
		{"evalsi.control=vsock:1 evalsi.control=vsock:2", Control{Kind: "vsock", Port: 2}, ""},
		{"console=ttyS0", Control{}, "names no control channel"},
		{"evalsi.control=vsock:x", Control{}, "want vsock:PORT"},
		{"evalsi.control=virtio-serial:", Control{}, "want virtio-serial:NAME"},
		{"evalsi.control=tcp:1", Control{}, `unknown channel kind "tcp"`},
	}
	for _, tt := range tests {
		got, err := ParseControl(tt.cmdline)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseControl(%q) = %+v, %v; want %+v, error containing %q", tt.cmdline, got, err, tt.want, tt.err)
		}
	}
}

func TestModuleArgs(t *testing.T) {
	cmdline := "console=ttyS0 virtio_mmio.device=4K@0xfeb00000:12 virtio_mmio.device=4K@0xfeb00200:13 virtio-rng.x=1 ext4.=bad virtio_mmio panic=-1"
	tests := []struct{ module, want string }{
		{"virtio_mmio", "device=4K@0xfeb00000:12 device=4K@0xfeb00200:13"},
		{"virtio_rng", "x=1"},
		{"ext4", ""},
		{"virtio_blk", ""},
	}
	for _, tt := range tests {
		if got := ModuleArgs(cmdline, tt.module); got != tt.want {
			t.Errorf("ModuleArgs(%s) = %q, want %q", tt.module, got, tt.want)
		}
	}
	for p, want := range map[string]string{"lib/modules/virtio-rng.ko": "virtio_rng", "virtio_mmio.ko": "virtio_mmio"} {
		if got := ModuleName(p); got != want {
			t.Errorf("ModuleName(%s) = %q, want %q", p, got, want)
		}
	}
}

func TestFindPort(t *testing.T) {
	root := t.TempDir()
	for dev, name := range map[string]string{"vport0p0": "", "vport0p1": "evalsi.0\n", "vport1p1": "other"} {
		d := filepath.Join(root, "sys/class/virtio-ports", dev)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			os.WriteFile(filepath.Join(d, "name"), []byte(name), 0o644)
		}
	}
	if got, err := FindPort(root, "evalsi.0"); got != "vport0p1" || err != nil {
		t.Errorf("FindPort(evalsi.0) = %q, %v", got, err)
	}
	if _, err := FindPort(root, "missing"); err == nil || !strings.Contains(err.Error(), `no virtio-serial port is named "missing"`) {
		t.Errorf("FindPort(missing): %v", err)
	}
	if _, err := FindPort(t.TempDir(), "evalsi.0"); err == nil || !strings.Contains(err.Error(), "virtio_console") {
		t.Errorf("FindPort without the class: %v", err)
	}
}

// TestContainerCaps: the guest's own table is sandbox.ContainerCapabilities.
func TestContainerCaps(t *testing.T) {
	var names []string
	for n := range containerCaps {
		names = append(names, n)
	}
	slices.Sort(names)
	want := slices.Clone(sandbox.ContainerCapabilities)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("guest capabilities %q, want %q", names, want)
	}
}

func TestEventCount(t *testing.T) {
	ev := "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n"
	for key, want := range map[string]int{"oom_kill": 2, "max": 3, "oom": 1, "absent": 0} {
		if got := eventCount(ev, key); got != want {
			t.Errorf("eventCount(%s) = %d, want %d", key, got, want)
		}
	}
}

// TestCommandDev makes the commands' /dev in a private mount namespace of
// the test's own thread, from this machine's /dev as the devtmpfs: only
// a container's nodes, and a node made in it opens nothing.
func TestCommandDev(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.Missing(t, "root", "mounting a tmpfs and binding device nodes needs it")
	}
	dir := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in a mount namespace of its own,
		// ends with the goroutine.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
				return fmt.Errorf("a private mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			devfd, err := unix.Open("/dev", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(devfd)
			dev := filepath.Join(dir, "dev")
			os.Mkdir(dev, 0o755)
			if err := commandDev(dev, devfd); err != nil {
				return err
			}
			var names []string
			ents, err := os.ReadDir(dev)
			if err != nil {
				return err
			}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			want := []string{"fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
			if !slices.Equal(names, want) {
				return fmt.Errorf("/dev has %q, want %q", names, want)
			}
			if err := os.WriteFile(dev+"/null", []byte("x"), 0); err != nil {
				return fmt.Errorf("writing null: %w", err)
			}
			b := make([]byte, 8)
			if f, err := os.Open(dev + "/urandom"); err != nil {
				return err
			} else if _, err := io.ReadFull(f, b); err != nil {
				return fmt.Errorf("reading urandom: %w", err)
			} else {
				f.Close()
			}
			ptmx, err := os.OpenFile(dev+"/ptmx", os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("opening a pseudo-terminal: %w", err)
			}
			ptmx.Close()
			// A node made where a command can write: nodev.
			for _, d := range []string{dev, dev + "/shm"} {
				n := d + "/made"
				if err := unix.Mknod(n, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
					return fmt.Errorf("mknod in %s: %w", d, err)
				}
				if f, err := os.OpenFile(n, os.O_WRONLY, 0); err == nil {
					f.Close()
					return fmt.Errorf("a node made in %s opened", d)
				} else if !errors.Is(err, unix.EACCES) {
					return fmt.Errorf("opening a node made in %s: %w, want EACCES (nodev)", d, err)
				}
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

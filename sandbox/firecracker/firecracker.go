// Package firecracker is the Firecracker VMM of the Firecracker rung: it
// boots a guest under Firecracker (optionally through its jailer), talks to
// Firecracker's HTTP API on a unix socket, connects the guest's control
// channel over Firecracker's hybrid vsock, and saves and restores full
// snapshots. The sandbox itself (exec protocol, disks, warm pools) is
// sandbox/vm's; this package only implements vm.VMM and vm.Snapshotter.
//
// Firecracker is configured with paths relative to its working directory
// (the machine's directory, or the jail's root under the jailer): the
// drives are links named drive0, drive1… in that directory and the vsock
// socket is v.sock. A snapshot records those relative paths, so a copy
// restored in its own directory opens its own disks and binds its own
// socket; Firecracker has no drive path override on restore (its
// SnapshotLoadParams has network_overrides and vsock_override only).
//
// The API calls follow Firecracker's published swagger description,
// vendored in testdata/firecracker.yaml, against which the tests' fake
// Firecracker validates every request.
package firecracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/vm"
)

// Defaults for Options and BootSpec fields left zero.
const (
	DefaultBinary     = "firecracker"
	DefaultChrootBase = "/srv/jailer"
	DefaultKVM        = "/dev/kvm"
	// DefaultVCPUs and DefaultMemoryMB apply when a BootSpec leaves them
	// zero.
	DefaultVCPUs    = 1
	DefaultMemoryMB = 256
	// MaxVCPUs is Firecracker's limit (MachineConfiguration.vcpu_count).
	MaxVCPUs = 32
)

// ControlPort is the guest's vsock port for the control channel: the
// guest listens on it (evalsi.control=vsock:1024) and the host connects.
const ControlPort = 1024

// guestCID is the guest's vsock context ID. Each Firecracker process has
// its own vsock device and unix socket, so every guest can use the lowest
// valid one (0-2 are reserved).
const guestCID = 3

// Options configure the VMM.
type Options struct {
	// Binary is the firecracker executable, a path or a name on PATH
	// (default "firecracker").
	Binary string
	// Jailer, when set, is the jailer executable: Firecracker then runs
	// chrooted, as UID:GID, with its files hard-linked into the jail. The
	// jailer needs root.
	Jailer string
	// UID and GID are the unprivileged user and group the jailer runs
	// Firecracker as (required with Jailer; 0 is refused).
	UID, GID int
	// ChrootBase is the jailer's --chroot-base-dir (default /srv/jailer).
	// It must be on the same filesystem as the machines' writable disks,
	// which are hard-linked into the jail.
	ChrootBase string
	// KVM is the KVM device (default /dev/kvm).
	KVM string
	// Logger gets the VMM's debug records (default: discarded).
	Logger *slog.Logger
}

// VMM is the Firecracker VMM.
type VMM struct {
	opts Options
	log  *slog.Logger
}

var (
	_ vm.VMM         = (*VMM)(nil)
	_ vm.Snapshotter = (*VMM)(nil)
)

// New returns the VMM with opts' zero fields defaulted.
func New(opts Options) *VMM {
	if opts.Binary == "" {
		opts.Binary = DefaultBinary
	}
	if opts.ChrootBase == "" {
		opts.ChrootBase = DefaultChrootBase
	}
	if opts.KVM == "" {
		opts.KVM = DefaultKVM
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &VMM{opts: opts, log: log}
}

// Name is the rung's name.
func (v *VMM) Name() string { return "firecracker" }

// Check says whether Firecracker can run here: its binary runs --version,
// the jailer (when configured) runs and the engine is root, and the KVM
// device opens read-write and creates a VM. It reports every problem it
// finds, not only the first.
func (v *VMM) Check(ctx context.Context) error {
	var errs []error
	if _, err := v.version(ctx, v.opts.Binary, "Firecracker v"); err != nil {
		errs = append(errs, err)
	}
	if v.opts.Jailer != "" {
		if _, err := v.version(ctx, v.opts.Jailer, "Jailer v"); err != nil {
			errs = append(errs, err)
		}
		if err := v.checkJailerConfig(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkKVM(v.opts.KVM); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("firecracker cannot run here: %w", errors.Join(errs...))
	}
	return nil
}

// version runs bin --version and checks that its output starts with
// prefix (Firecracker prints "Firecracker v1.x.y", the jailer "Jailer
// v1.x.y"), so a different program of the same name is not mistaken for it.
func (v *VMM) version(ctx context.Context, bin, prefix string) (string, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s not found (%w): install it from https://github.com/firecracker-microvm/firecracker/releases or set its path in the config", bin, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s --version failed (%w): %s", path, err, tail(out.String(), 512))
	}
	got := strings.TrimSpace(out.String())
	if !strings.HasPrefix(got, prefix) {
		return "", fmt.Errorf("%s --version printed %q, not %q…: it is not the expected program", path, tail(got, 200), prefix)
	}
	line, _, _ := strings.Cut(got, "\n")
	return line, nil
}

// KVM ioctls (linux/kvm.h: _IO(KVMIO=0xAE, 0x00) and _IO(KVMIO, 0x01)).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	kvmAPIVersion    = 12
)

// checkKVM opens the KVM device and creates (and drops) a VM: a device
// that opens but cannot create VMs (no virtualisation extensions, a
// nested host refusing it) fails here rather than at the first boot.
func checkKVM(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s does not open read-write (%w): Firecracker needs KVM (hardware virtualisation, and access to the device: root or the kvm group)", dev, err)
	}
	defer f.Close()
	apiVersion, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), kvmGetAPIVersion, 0)
	if errno != 0 {
		return fmt.Errorf("%s: KVM_GET_API_VERSION failed (%w): it is not a KVM device", dev, errno)
	}
	if apiVersion != kvmAPIVersion {
		return fmt.Errorf("%s: KVM API version %d, Firecracker needs %d", dev, apiVersion, kvmAPIVersion)
	}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), kvmCreateVM, 0)
	if errno != 0 {
		return fmt.Errorf("%s: KVM_CREATE_VM failed (%w): KVM is present but cannot create VMs here (virtualisation disabled, or a nested host without it)", dev, errno)
	}
	unix.Close(int(fd))
	return nil
}

// tail is the last n bytes of s, marked when cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

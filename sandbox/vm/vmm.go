// Package vm holds what the microVM rungs (firecracker, qemu) share: the
// guest's boot files (kernel, initramfs with evalsi-guest and the modules
// it loads), root disks made from images, snapshots, warm pools, and the
// sandbox itself, which talks to evalsi-guest over the VMM's control
// channel with the exec protocol (sandbox/execproto). A rung differs only
// in its VMM.
package vm

import (
	"context"
	"io"
)

// VMM boots machines: one per rung (sandbox/qemu, sandbox/firecracker).
type VMM interface {
	// Name is the rung's name.
	Name() string
	// Check says whether the VMM can run here (its binary, /dev/kvm),
	// without booting anything.
	Check(ctx context.Context) error
	// Boot starts a machine and returns once its control channel is
	// connected (the guest may still be booting: the caller waits for
	// the guest's FrameReady on it). ctx bounds the start only; the
	// machine runs until Kill.
	Boot(ctx context.Context, spec BootSpec) (Machine, error)
}

// Snapshotter is a VMM that can save a running machine's whole state and
// start copies of it.
type Snapshotter interface {
	// Save pauses m, writes its state (memory and devices) under dir and
	// stops it. The disks must not change afterwards: copies restored
	// from dir get disks with the same content, through overlays.
	Save(ctx context.Context, m Machine, dir string) error
	// Restore starts a machine from the state Save wrote under dir, with
	// spec's disks (the same content as at Save) and a fresh control
	// channel, and returns once the channel is connected.
	Restore(ctx context.Context, spec BootSpec, dir string) (Machine, error)
}

// BootSpec is one machine.
type BootSpec struct {
	// Kernel is the guest kernel; Initrd the initramfs (Boot files).
	Kernel, Initrd string
	// Cmdline is the kernel command line the rung adds its own device
	// arguments to.
	Cmdline  string
	Disks    []Disk
	VCPUs    int
	MemoryMB int
	// Dir is the machine's own directory: its sockets, its console log
	// (console.log) and whatever else the VMM keeps. It exists, and is
	// removed by the caller after Kill.
	Dir string
}

// Disk is a block device of the machine, in order: the first is the
// guest's root (/dev/vda).
type Disk struct {
	Path string
	// Format is "raw" or "qcow2" (a VMM that cannot read qcow2 gets raw
	// files only).
	Format   string
	ReadOnly bool
}

// Stopper is a machine that can end cleanly: its VMM writes out what it
// caches of the disks (qcow2 metadata) before it exits, where Kill loses
// it. Snapshot stops the setup machine this way when it can.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Machine is a running VM.
type Machine interface {
	// Control is the guest's control channel, connected: the exec
	// protocol's byte stream.
	Control() io.ReadWriteCloser
	// Done is closed when the VMM process has exited; Err then says how,
	// with the tail of the guest's console.
	Done() <-chan struct{}
	Err() error
	// Kill stops the machine at once and waits for the VMM to exit. It is
	// idempotent.
	Kill() error
}

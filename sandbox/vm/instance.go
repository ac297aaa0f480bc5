package vm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
)

// instance is one booted machine whose guest serves, with the host's end
// of its exec protocol: what a warm pool keeps and a sandbox takes.
type instance struct {
	m    Machine
	c    *execproto.Client
	tun  *execproto.Tunnel
	dir  string // the machine's directory, removed with it
	disk string // its writable disk
	fmt  string // the disk's format
	// restored: started from a VM snapshot (the guest was told the
	// clock and given fresh entropy).
	restored bool
	// proxy is where the guest's tunnelled connections go (the egress
	// proxy, "host:port" or "unix:/path"); empty: refused.
	proxy atomic.Pointer[string]

	killOnce sync.Once
	killErr  error
}

// guestCmdline is what every guest boots with; the VMM adds its devices'
// and control channel's arguments. loglevel, not quiet: quiet lost the
// guest's own console output under QEMU.
const guestCmdline = "console=ttyS0 panic=-1 loglevel=4"

// boot starts a machine on a writable copy of root at disk (default: in
// dir; a qcow2 overlay, or a clone for raw-only VMMs), from the VM snapshot
// in state when set, and waits until its guest serves.
func (r *Rung) boot(ctx context.Context, bf BootFiles, set sandbox.VMSettings, root Disk, dir, disk, state string) (_ *instance, err error) {
	inst := &instance{dir: dir, fmt: r.diskFormat(), disk: disk}
	if inst.disk == "" {
		inst.disk = filepath.Join(dir, "disk."+inst.fmt)
	}
	if r.opts.RawDisks {
		err = CloneRaw(ctx, root.Path, inst.disk)
	} else {
		err = Overlay(ctx, root.Path, root.Format, inst.disk)
	}
	if err != nil {
		return nil, fmt.Errorf("making the machine's disk: %w", err)
	}
	spec := BootSpec{Kernel: bf.Kernel, Initrd: bf.Initrd, Cmdline: guestCmdline,
		Disks: []Disk{{Path: inst.disk, Format: inst.fmt}}, VCPUs: set.VCPUs, MemoryMB: set.MemoryMB, Dir: dir}
	bctx, cancel := context.WithTimeout(ctx, r.opts.BootTimeout)
	defer cancel()
	if state != "" {
		snap, ok := r.opts.VMM.(Snapshotter)
		if !ok {
			return nil, fmt.Errorf("the %s rung cannot restore VM snapshots", r.Name())
		}
		inst.m, err = snap.Restore(bctx, spec, state)
		inst.restored = true
	} else {
		inst.m, err = r.opts.VMM.Boot(bctx, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the %s machine: %w", r.Name(), err)
	}
	defer func() {
		if err != nil {
			inst.kill()
		}
	}()
	ctl := inst.m.Control()
	inst.c = execproto.NewClient(ctl, ctl, execproto.ClientOptions{
		Tunnel: func(kind byte, id uint32, p []byte) { inst.tun.Frame(kind, id, p) },
		Ended: func(readErr error) error {
			select {
			case <-inst.m.Done():
				return fmt.Errorf("the %s machine ended: %w", r.Name(), inst.m.Err())
			case <-time.After(2 * time.Second):
			}
			return fmt.Errorf("the %s guest's control channel ended (%v)", r.Name(), readErr)
		},
	})
	inst.tun = execproto.NewTunnel(inst.c.Send, inst.dialProxy)
	if inst.restored {
		// A restored guest may still be in the session it was saved in
		// (virtio-serial keeps it: its FrameReady went to the saved
		// machine's host) or start a new one (vsock resets its
		// connections): either way it answers the restore request, which
		// also proves it serves.
		seed := make([]byte, 64)
		rand.Read(seed)
		if err := inst.request(bctx, execproto.FrameRestore, execproto.RestoreMsg{UnixNano: time.Now().UnixNano(), Seed: seed}.Marshal()); err != nil {
			return nil, fmt.Errorf("setting the restored %s guest's clock and entropy: %w%s", r.Name(), err, consoleTail(dir))
		}
		return inst, nil
	}
	if err := inst.c.WaitReady(bctx); err != nil {
		return nil, fmt.Errorf("waiting for the %s guest to serve: %w%s", r.Name(), err, consoleTail(dir))
	}
	return inst, nil
}

// diskFormat is the format of the machines' writable disks.
func (r *Rung) diskFormat() string {
	if r.opts.RawDisks {
		return "raw"
	}
	return "qcow2"
}

// request sends a request answered by a FileResult and turns its Err into
// an error.
func (inst *instance) request(ctx context.Context, kind byte, payload []byte) error {
	res, err := inst.c.Request(ctx, kind, payload)
	if err != nil {
		return err
	}
	if res.Err != "" {
		return errors.New(res.Err)
	}
	return nil
}

func (inst *instance) dialProxy(ctx context.Context) (net.Conn, error) {
	p := inst.proxy.Load()
	if p == nil || *p == "" {
		return nil, errors.New("the sandbox's policy reaches no proxy")
	}
	var d net.Dialer
	if path, ok := strings.CutPrefix(*p, "unix:"); ok {
		return d.DialContext(ctx, "unix", path)
	}
	return d.DialContext(ctx, "tcp", *p)
}

// kill stops the machine and removes its directory.
func (inst *instance) kill() error {
	inst.killOnce.Do(func() {
		if inst.tun != nil {
			inst.tun.Close()
		}
		if inst.m != nil {
			inst.killErr = inst.m.Kill()
		}
		if err := os.RemoveAll(inst.dir); err != nil && inst.killErr == nil {
			inst.killErr = fmt.Errorf("removing the machine's directory: %w", err)
		}
	})
	return inst.killErr
}

// consoleTail is the end of a machine's console log, for errors.
func consoleTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "console.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nthe guest's console ends:\n" + strings.TrimSpace(string(b))
}

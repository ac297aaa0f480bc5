package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"evals.si/sandbox"
)

// A boot snapshot is a machine booted on an image's root disk and saved as
// soon as its guest served, before any setup: kept in the cache per
// (boot files, root disk, size), it lets every fresh sandbox of that image
// restore in a fraction of a second instead of booting (seconds under
// KVM, many under software emulation). Restored copies get their own clock
// and entropy (FrameRestore) and their own writable disk over the saved
// one, which nothing writes again.
//
//	bootsnap/KEY/boot.FMT   the disk the saved machine booted on (frozen)
//	bootsnap/KEY/state/     its saved state
//	bootsnap/KEY/ready      written last: the snapshot is whole
func (r *Rung) bootSnapshot(ctx context.Context, bf BootFiles, set sandbox.VMSettings, root Disk, cache string) (Disk, string, error) {
	snap, ok := r.opts.VMM.(Snapshotter)
	if !ok || r.opts.ColdBoot {
		return root, "", nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d", bf.Kernel, bf.Initrd, root.Path, set.VCPUs, set.MemoryMB)
	base := filepath.Join(cache, "bootsnap")
	dir := filepath.Join(base, hex.EncodeToString(h.Sum(nil))[:24])
	disk := Disk{Path: filepath.Join(dir, "boot."+r.diskFormat()), Format: r.diskFormat()}
	state := filepath.Join(dir, "state")
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return disk, state, nil
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return disk, state, nil // another process made it meanwhile
	}
	os.RemoveAll(dir) // a build that died half way
	tmp, err := os.MkdirTemp(base, ".build-")
	if err != nil {
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	defer os.RemoveAll(tmp)
	mdir := filepath.Join(tmp, "machine")
	if err := os.Mkdir(mdir, 0o700); err != nil {
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	// The disk is made at its final path: a VMM may record it in the
	// saved state.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	inst, err := r.boot(ctx, bf, set, root, mdir, disk.Path, "")
	if err != nil {
		os.RemoveAll(dir)
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	if err := os.Mkdir(state, 0o700); err != nil {
		inst.kill()
		os.RemoveAll(dir)
		return Disk{}, "", fmt.Errorf("boot snapshot: %w", err)
	}
	err = snap.Save(ctx, inst.m, state)
	inst.kill()
	if err == nil && disk.Format == "qcow2" {
		// The VMM wrote the disk: its backing is the engine's word again.
		err = Rebase(ctx, disk.Path, root.Path, root.Format)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "ready"), nil, 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return Disk{}, "", fmt.Errorf("boot snapshot: saving the booted machine: %w", err)
	}
	return disk, state, nil
}

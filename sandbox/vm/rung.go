package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"evals.si/sandbox"
)

// Options configure a microVM rung.
type Options struct {
	VMM VMM
	// Settings are the rung's (the machine's); WithVM makes a rung with
	// an environment's over them.
	Settings sandbox.VMSettings
	// RawDisks: the VMM reads raw disk files only (Firecracker), so
	// copies are clones instead of qcow2 overlays.
	RawDisks bool
	// CacheDir keeps boot files, root disks and warm machines (default:
	// the user's cache directory's evalsi/vm).
	CacheDir string
	// BootTimeout bounds a boot until the guest serves (default 2
	// minutes: software emulation on a loaded machine is slow).
	BootTimeout time.Duration
	// FreeMB is the room a root disk has beyond its image (default 2048).
	FreeMB int
	// ColdBoot: every sandbox without a setup snapshot boots, instead of
	// restoring the image's boot snapshot (bootsnap.go).
	ColdBoot bool
}

// Rung is a microVM rung over one VMM.
type Rung struct {
	opts Options

	probeMu sync.Mutex
	probed  bool
	probe   sandbox.Probe

	mu    sync.Mutex
	pools map[string]*warmPool
	// with are the rungs WithVM made, by their settings.
	with map[sandbox.VMSettings]*Rung
	// boot is PrepareBoot's answer, kept while the kernel and guest files
	// are the ones it read (PrepareBoot hashes both: megabytes a create
	// should not read again).
	bootFS   BootFiles
	bootSeen string
}

// Default settings of a VM when neither the rung nor the spec sets them.
const (
	defaultVCPUs    = 1
	defaultMemoryMB = 1024
)

// New returns a rung over o.VMM.
func New(o Options) *Rung {
	if o.BootTimeout == 0 {
		o.BootTimeout = 2 * time.Minute
	}
	if o.FreeMB == 0 {
		o.FreeMB = 2048
	}
	return &Rung{opts: o, pools: map[string]*warmPool{}, with: map[sandbox.VMSettings]*Rung{}}
}

// WithVM is the rung with s over its own settings (sandbox.VMConfigurable),
// made once per distinct s.
func (r *Rung) WithVM(s sandbox.VMSettings) sandbox.Rung {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.with[s]; c != nil {
		return c
	}
	o := r.opts
	o.Settings = merge(o.Settings, &s)
	c := New(o)
	r.with[s] = c
	return c
}

// merge is cfg's settings over base's.
func merge(base sandbox.VMSettings, cfg *sandbox.VMSettings) sandbox.VMSettings {
	if cfg == nil {
		return base
	}
	if cfg.Kernel != "" {
		base.Kernel = cfg.Kernel
	}
	if cfg.Guest != "" {
		base.Guest = cfg.Guest
	}
	if cfg.WarmPool != 0 {
		base.WarmPool = cfg.WarmPool
	}
	if cfg.VCPUs != 0 {
		base.VCPUs = cfg.VCPUs
	}
	if cfg.MemoryMB != 0 {
		base.MemoryMB = cfg.MemoryMB
	}
	return base
}

func (r *Rung) Name() string             { return r.opts.VMM.Name() }
func (r *Rung) Isolation() sandbox.Level { return sandbox.LevelVM }

// settings are the rung's, with the defaults filled: the guest next to
// this executable, the kernel from the documented places.
func (r *Rung) settings() (sandbox.VMSettings, error) {
	s := r.opts.Settings
	if s.VCPUs == 0 {
		s.VCPUs = defaultVCPUs
	}
	if s.MemoryMB == 0 {
		s.MemoryMB = defaultMemoryMB
	}
	var err error
	if s.Kernel == "" {
		if s.Kernel, err = DefaultKernel(); err != nil {
			return s, err
		}
	}
	if s.Guest == "" {
		if s.Guest, err = DefaultGuest(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// DefaultKernelPaths are where a VM rung looks for its kernel when the
// spec's settings name none: the documented place, then the bundle
// scripts/build-vm-kernel.sh caches (globs).
var DefaultKernelPaths = []string{"/var/lib/evalsi/vmlinux", "/var/lib/evalsi/vmlinuz", "/var/cache/evalsi/vmkernel/current/boot/vmlinuz-*"}

// DefaultKernel is the first of DefaultKernelPaths that exists.
func DefaultKernel() (string, error) {
	for _, p := range DefaultKernelPaths {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("no guest kernel: none of %v exists; set sandbox.<rung>.kernel, or run scripts/build-vm-kernel.sh (Debian's kernel with its modules)", DefaultKernelPaths)
}

// DefaultGuest is evalsi-guest next to this executable, as `make build`
// puts it.
func DefaultGuest() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding evalsi-guest: %w", err)
	}
	p := filepath.Join(filepath.Dir(exe), "evalsi-guest")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no evalsi-guest next to %s: build it with `make build` (or go build -o %s ./cmd/evalsi-guest, CGO_ENABLED=0), or set sandbox.<rung>.guest", exe, p)
	}
	return p, nil
}

func (r *Rung) cacheDir() (string, error) {
	d := r.opts.CacheDir
	if d == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("finding a cache directory for the %s rung: %w", r.Name(), err)
		}
		d = filepath.Join(base, "evalsi", "vm")
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("creating the %s rung's cache %s: %w", r.Name(), d, err)
	}
	return d, nil
}

// Probe checks the VMM, the kernel and the guest, and boots a VM from an
// empty root disk until its guest serves: a rung that cannot boot does not
// work, whatever its binaries say. Done once per rung.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	if r.probed {
		return r.probe
	}
	p := sandbox.Probe{Rung: r.Name(), Isolation: sandbox.LevelVM}
	if err := r.bootTest(ctx); err != nil {
		p.Reason = err.Error()
		if ctx.Err() != nil {
			return p // cut short: probe again next time
		}
	} else {
		p.Works = true
	}
	r.probe, r.probed = p, true
	return p
}

func (r *Rung) bootTest(ctx context.Context) error {
	if err := r.opts.VMM.Check(ctx); err != nil {
		return err
	}
	set, err := r.settings()
	if err != nil {
		return err
	}
	cache, err := r.cacheDir()
	if err != nil {
		return err
	}
	boot, err := r.bootFiles(ctx, cache, set)
	if err != nil {
		return err
	}
	empty := filepath.Join(cache, "probe-root")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return fmt.Errorf("probe root: %w", err)
	}
	disk, err := RootDisk(ctx, filepath.Join(cache, "disks"), "probe-empty", empty, 16)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cache, "probe-")
	if err != nil {
		return fmt.Errorf("probe machine directory: %w", err)
	}
	defer os.RemoveAll(dir)
	inst, err := r.boot(ctx, boot, set, Disk{Path: disk, Format: "raw"}, dir, "", "")
	if err != nil {
		return fmt.Errorf("a test boot failed: %w", err)
	}
	inst.kill()
	return nil
}

// bootFiles is PrepareBoot's, once per kernel and guest as they are on
// disk (path, size, modification time, inode).
func (r *Rung) bootFiles(ctx context.Context, cache string, set sandbox.VMSettings) (BootFiles, error) {
	id := ""
	for _, p := range []string{set.Kernel, set.Guest} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return BootFiles{}, fmt.Errorf("the %s rung's boot files: %w", r.Name(), &os.PathError{Op: "stat", Path: p, Err: err})
		}
		id += fmt.Sprintf("%s\x00%d\x00%d\x00%d.%d\x00", p, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
	}
	r.mu.Lock()
	if r.bootSeen == id {
		defer r.mu.Unlock()
		return r.bootFS, nil
	}
	r.mu.Unlock()
	bf, err := PrepareBoot(ctx, filepath.Join(cache, "boot"), set.Kernel, set.Guest)
	if err != nil {
		return BootFiles{}, err
	}
	r.mu.Lock()
	r.bootFS, r.bootSeen = bf, id
	r.mu.Unlock()
	return bf, nil
}

// diskKey names a root disk in the cache: the image digest, else the
// root's path with its directory's inode and change time (a local root
// rebuilt at the same path is a new tree there; one changed in place
// below its top directory is not seen: the image store never does that).
func diskKey(cfg sandbox.Config) string {
	if cfg.ImageDigest != "" {
		return cfg.ImageDigest
	}
	id := cfg.Root
	var st syscall.Stat_t
	if err := syscall.Stat(cfg.Root, &st); err == nil {
		id = fmt.Sprintf("%s\x00%d\x00%d.%d\x00%d.%d", cfg.Root, st.Ino, st.Ctim.Sec, st.Ctim.Nsec, st.Mtim.Sec, st.Mtim.Nsec)
	}
	sum := sha256.Sum256([]byte(id))
	return "root-" + hex.EncodeToString(sum[:12])
}

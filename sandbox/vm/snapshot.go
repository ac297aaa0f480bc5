package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/execproto"
)

// A setup snapshot is a layer directory:
//
//	layer.json   what it is (layerMeta)
//	disk.FMT     the setup's disk, frozen: a qcow2 overlay over the image's
//	             root disk, or a raw clone
//	boot.FMT     when the VMM snapshots: the disk of a VM booted on disk.FMT
//	             and saved once its guest served, frozen too
//	state/       that VM's saved state
//
// Trials restore state/ with a fresh copy of boot.FMT, so their guests
// start serving at once instead of booting; without state/ they boot on a
// copy of disk.FMT. The guest of the saved VM was never set up, so each
// trial sets its own workdir, limits and policy.
const layerMetaFile = "layer.json"

type layerMeta struct {
	Rung     string `json:"rung"`
	Format   string `json:"format"`
	HasState bool   `json:"has_state"`
}

type layer struct {
	dir  string
	meta layerMeta
}

func (l layer) boot() Disk {
	name := "disk."
	if l.meta.HasState {
		name = "boot."
	}
	return Disk{Path: filepath.Join(l.dir, name+l.meta.Format), Format: l.meta.Format}
}

func (l layer) state() string {
	if !l.meta.HasState {
		return ""
	}
	return filepath.Join(l.dir, "state")
}

func (r *Rung) readLayer(sl sandbox.Layer) (layer, error) {
	if sl.Dir == "" {
		return layer{}, fmt.Errorf("the %s rung's snapshot layers are directories; got %+v", r.Name(), sl)
	}
	b, err := os.ReadFile(filepath.Join(sl.Dir, layerMetaFile))
	if errors.Is(err, fs.ErrNotExist) {
		return layer{}, fmt.Errorf("snapshot layer %s was not made by a VM rung (no %s): a setup snapshot belongs to the rung that made it", sl.Dir, layerMetaFile)
	}
	if err != nil {
		return layer{}, fmt.Errorf("reading snapshot layer %s: %w", sl.Dir, err)
	}
	l := layer{dir: sl.Dir}
	if err := json.Unmarshal(b, &l.meta); err != nil {
		return layer{}, fmt.Errorf("reading snapshot layer %s: %w", sl.Dir, err)
	}
	if l.meta.Rung != r.Name() || l.meta.Format != r.diskFormat() {
		return layer{}, fmt.Errorf("snapshot layer %s was made by the %s rung (%s disks), not this %s rung", sl.Dir, l.meta.Rung, l.meta.Format, r.Name())
	}
	return l, nil
}

// Snapshot keeps the sandbox's disk as a layer and, where the VMM can,
// a VM booted on it and saved, for trials to restore.
func (s *Sandbox) Snapshot(ctx context.Context) (_ sandbox.Layer, err error) {
	dir, err := s.life.Snapshot(s.state)
	if err != nil {
		return sandbox.Layer{}, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.inst.request(sctx, execproto.FrameSync, nil); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: flushing the guest's disk: %w", err)
	}
	stop := s.inst.m.Kill
	if st, ok := s.inst.m.(Stopper); ok {
		stop = func() error { return st.Stop(sctx) }
	}
	if err := stop(); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: stopping the machine: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
	}
	f := s.inst.fmt
	meta := layerMeta{Rung: s.r.Name(), Format: f}
	disk := filepath.Join(dir, "disk."+f)
	if err := os.Rename(s.inst.disk, disk); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: keeping the disk: %w", err)
	}
	// The VMM wrote that file: its backing is the engine's word again
	// before anyone starts from it.
	if f == "qcow2" {
		if err := Rebase(ctx, disk, s.root.Path, s.root.Format); err != nil {
			return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
		}
	}
	if snap, ok := s.r.opts.VMM.(Snapshotter); ok {
		// The machine's own directory is in the cache, whose short path
		// keeps its sockets' paths within a unix socket's limit.
		mdir, err := os.MkdirTemp(filepath.Join(s.cache, "machines"), "m-")
		if err != nil {
			return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
		}
		inst, err := s.r.boot(ctx, s.boot, s.set, Disk{Path: disk, Format: f}, mdir, filepath.Join(dir, "boot."+f), "")
		if err != nil {
			os.RemoveAll(mdir)
			return sandbox.Layer{}, fmt.Errorf("snapshot: booting the machine to save: %w", err)
		}
		state := filepath.Join(dir, "state")
		if err := os.Mkdir(state, 0o700); err != nil {
			inst.kill()
			return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
		}
		err = snap.Save(ctx, inst.m, state)
		inst.kill()
		if err != nil {
			return sandbox.Layer{}, fmt.Errorf("snapshot: saving the machine: %w", err)
		}
		if f == "qcow2" {
			if err := Rebase(ctx, filepath.Join(dir, "boot."+f), disk, f); err != nil {
				return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
			}
		}
		meta.HasState = true
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, layerMetaFile), b, 0o600); err != nil {
		return sandbox.Layer{}, fmt.Errorf("snapshot: %w", err)
	}
	return sandbox.Layer{Dir: dir}, nil
}

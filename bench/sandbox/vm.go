package main

import (
	"context"
	"path/filepath"
	"strconv"

	"evals.si/sandbox"
	"evals.si/sandbox/qemu"
	"evals.si/sandbox/vm"
)

type vmCaseNames struct{ boot, restore, pool string }

// vmCases are the qemu rung's three ways to a serving guest, each a
// trial's create + exec `true` + close on the small image root: a cold
// boot (no VM snapshot at all), a restore from the setup snapshot (what a
// trial of an environment with setup does), and a take from a warm pool of
// two restored machines (warm_pool: 2), which refills between takes.
func vmCases(ctx context.Context, o options, dir string) ([]benchCase, vmCaseNames) {
	names := vmCaseNames{
		boot:    "qemu rung, cold boot",
		restore: "qemu rung, restored from setup snapshot",
		pool:    "qemu rung, warm-pool take",
	}
	skipAll := func(why string) ([]benchCase, vmCaseNames) {
		return []benchCase{{name: names.boot, skipped: why}, {name: names.restore, skipped: why}, {name: names.pool, skipped: why}}, names
	}
	root, err := imageRoot(o.cacheDir, o.smallMB)
	if err != nil {
		return skipAll(err.Error())
	}
	set := sandbox.VMSettings{Kernel: o.vmKernel, Guest: o.vmGuest, VCPUs: 1, MemoryMB: 256}
	vmCache := filepath.Join(o.cacheDir, "vm")
	newRung := func(cold bool, warm int) *vm.Rung {
		s := set
		s.WarmPool = warm
		return vm.New(vm.Options{VMM: qemu.New(qemu.Options{}), Settings: s, CacheDir: vmCache, ColdBoot: cold})
	}
	cold, restore, pool := newRung(true, 0), newRung(false, 0), newRung(false, 2)
	if p := restore.Probe(ctx); !p.Works {
		return skipAll(p.Reason)
	}
	base := sandbox.Config{Root: root, Workdir: "/workspace"}
	// The small root has sh and true only: the setup is the shell's own.
	layer, err := setupSnapshot(ctx, restore, base, filepath.Join(dir, "setup"), "echo ok > installed")
	if err != nil {
		return skipAll(err.Error())
	}
	withLayer := base
	withLayer.Layers = []sandbox.Layer{layer}
	caseOf := func(name string, r *vm.Rung, cfg sandbox.Config) benchCase {
		return benchCase{name: name, fn: func(i int) error {
			c := cfg
			c.StateDir = filepath.Join(dir, name, strconv.Itoa(i))
			return cycle(ctx, r, c)
		}}
	}
	return []benchCase{
		caseOf(names.boot, cold, base),
		caseOf(names.restore, restore, withLayer),
		caseOf(names.pool, pool, withLayer),
	}, names
}

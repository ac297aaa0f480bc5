//go:build linux && amd64

package docker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/moby/profiles/seccomp"
	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// These tests read the seccomp filter the kernel holds for a container's
// pid 1 (PTRACE_SECCOMP_GET_FILTER: host CAP_SYS_ADMIN, the daemon on this
// machine) and run it, as the kernel would, for every x86 syscall number
// and the argument values its comparisons distinguish: what a container
// may call, measured rather than read from the profile.

// Audit architectures and return values (linux/audit.h, linux/seccomp.h).
const (
	auditArchX86_64 = 0xc000003e
	auditArchI386   = 0x40000003
	x32Bit          = 0x40000000
	retAllow        = 0x7fff0000
	retErrno        = 0x00050000
)

// ioctlNrs are ioctl's numbers on each x86 ABI.
var ioctlNrs = []verdictKey{{arch: auditArchX86_64, nr: 16}, {arch: auditArchX86_64, nr: x32Bit | 514}, {arch: auditArchI386, nr: 54}}

// TestSeccompFilter compares the filter of a sandbox with those of
// containers made with Docker's default profile (moby/profiles) and with
// the daemon's built-in default.
func TestSeccompFilter(t *testing.T) {
	sb := newSandbox(t, sandbox.Config{})
	ours := filterOf(t, sb, sb.id)
	defJSON, err := json.Marshal(seccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	def := filterOf(t, sb, startLike(t, sb, "seccomp="+string(defJSON)))
	builtin := filterOf(t, sb, startLike(t, sb))
	probes, readers := probeValues(ours, def, builtin), argReaders(t, ours, def, builtin)
	t.Logf("filters of %d, %d and %d instructions; %d syscalls read arguments; %d probe values", len(ours), len(def), len(builtin), len(readers), len(probes))

	// The sandbox's filter is Docker's default exactly, but for EPERM on
	// the refused ioctl requests, whatever the bits above 32.
	t.Run("default plus rule", func(t *testing.T) {
		vo, vd := verdicts(t, ours, readers, probes), verdicts(t, def, readers, probes)
		refused := 0
		for k, d := range vd {
			want := d
			if slices.Contains(ioctlNrs, verdictKey{arch: k.arch, nr: k.nr}) && k.arg == 1 && slices.Contains(refusedIoctls, uint32(k.val)) {
				want = retErrno | uint32(unix.EPERM)
				refused++
				if d != retAllow {
					t.Errorf("%v: Docker's default gives %s, want allow (the rule would change nothing)", k, verdictName(d))
				}
			}
			if got := vo[k]; got != want {
				t.Errorf("%v: the sandbox's filter gives %s, want %s", k, verdictName(got), verdictName(want))
			}
		}
		if refused == 0 {
			t.Error("no refused ioctl request probed")
		}
	})

	// What Docker's current default allows that the daemon's built-in
	// refuses (an older daemon, such as Debian 12's 20.10) is only what
	// seccomp.go lists.
	t.Run("against daemon default", func(t *testing.T) {
		loosened := map[verdictKey]bool{}
		for _, l := range []struct {
			name              string
			x86_64, x32, i386 uint32 // 0: none on that ABI
		}{
			{"name_to_handle_at", 303, 303, 341},
			{"process_vm_readv", 310, 539, 347},
			{"process_vm_writev", 311, 540, 348},
			{"pkey_mprotect", 329, 329, 380},
			{"pkey_alloc", 330, 330, 381},
			{"pkey_free", 331, 331, 382},
			{"cachestat", 451, 451, 451},
			{"fchmodat2", 452, 452, 452},
			{"map_shadow_stack", 453, 0, 453},
			{"futex_wake", 454, 454, 454},
			{"futex_wait", 455, 455, 455},
			{"futex_requeue", 456, 456, 456},
		} {
			loosened[verdictKey{arch: auditArchX86_64, nr: l.x86_64}] = true
			if l.x32 != 0 {
				loosened[verdictKey{arch: auditArchX86_64, nr: x32Bit | l.x32}] = true
			}
			if l.i386 != 0 {
				loosened[verdictKey{arch: auditArchI386, nr: l.i386}] = true
			}
		}
		vd, vb := verdicts(t, def, readers, probes), verdicts(t, builtin, readers, probes)
		diffs := map[string]int{}
		for k, d := range vd {
			b := vb[k]
			if d == b {
				continue
			}
			diffs[fmt.Sprintf("%s nr %d: %s -> %s", archName(k), k.nr&^x32Bit, verdictName(b), verdictName(d))]++
			if d == retAllow && !loosened[verdictKey{arch: k.arch, nr: k.nr}] {
				t.Errorf("%v: Docker's default profile allows what the daemon's built-in default answers %s", k, verdictName(b))
			}
		}
		for _, d := range slices.Sorted(maps.Keys(diffs)) {
			t.Logf("daemon built-in -> Docker's default: %s (%d probes)", d, diffs[d])
		}
	})
}

// startLike starts a container like sb's (image, binds, user, keeper)
// with the given security options besides no-new-privileges, and returns
// its ID.
func startLike(t *testing.T, sb *Sandbox, securityOpt ...string) string {
	t.Helper()
	ctx := context.Background()
	hcfg := &container.HostConfig{NetworkMode: "none", SecurityOpt: append([]string{"no-new-privileges"}, securityOpt...)}
	for _, d := range sb.binds {
		hcfg.Mounts = append(hcfg.Mounts, mount.Mount{Type: mount.TypeBind, Source: d, Target: d, ReadOnly: true})
	}
	c, err := sb.cli.ContainerCreate(ctx, &container.Config{Image: sb.image, Entrypoint: []string{}, Cmd: []string{"/bin/sh", "-c", keeperScript}, User: "0:0"}, hcfg, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sb.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	if err := sb.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// filterOf returns the seccomp filter of the container's pid 1.
func filterOf(t *testing.T, sb *Sandbox, id string) []unix.SockFilter {
	t.Helper()
	in, err := sb.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State == nil || in.State.Pid == 0 {
		t.Fatalf("container %s has no pid", short(id))
	}
	type result struct {
		prog []unix.SockFilter
		err  error
	}
	done := make(chan result)
	go func() {
		// A tracee belongs to the thread that attached; the locked thread
		// ends with this goroutine, which also detaches.
		runtime.LockOSThread()
		prog, err := readFilter(in.State.Pid)
		done <- result{prog, err}
	}()
	r := <-done
	if errors.Is(r.err, unix.EPERM) {
		testenv.Missing(t, "PTRACE_SECCOMP_GET_FILTER", fmt.Sprintf("reading pid %d's seccomp filter: %v (needs CAP_SYS_ADMIN)", in.State.Pid, r.err))
	}
	if r.err != nil {
		t.Fatalf("reading container %s's seccomp filter: %v", short(id), r.err)
	}
	return r.prog
}

func readFilter(pid int) ([]unix.SockFilter, error) {
	const ptraceSeccompGetFilter = 0x420c
	if err := unix.PtraceAttach(pid); err != nil {
		return nil, fmt.Errorf("attaching: %w", err)
	}
	defer unix.PtraceDetach(pid)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return nil, fmt.Errorf("waiting for the stop: %w", err)
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(pid), 1, 0, 0, 0); e != unix.ENOENT {
		return nil, fmt.Errorf("the process has more than one filter (%v)", e)
	}
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		return nil, e
	}
	prog := make([]unix.SockFilter, n)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceSeccompGetFilter, uintptr(pid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0); e != 0 {
		return nil, e
	}
	return prog, nil
}

// verdictKey is one probe: a syscall on an ABI with argument arg set to
// val and the others 0 (arg -1: all 0).
type verdictKey struct {
	arch, nr uint32
	arg      int
	val      uint64
}

func (k verdictKey) String() string {
	if k.arg < 0 {
		return fmt.Sprintf("%s syscall %d", archName(k), k.nr&^x32Bit)
	}
	return fmt.Sprintf("%s syscall %d arg%d=%#x", archName(k), k.nr&^x32Bit, k.arg, k.val)
}

func archName(k verdictKey) string {
	switch {
	case k.arch == auditArchI386:
		return "i386"
	case k.nr&x32Bit != 0:
		return "x32"
	}
	return "x86_64"
}

func verdictName(v uint32) string {
	switch {
	case v == retAllow:
		return "allow"
	case v&0xffff0000 == retErrno:
		return fmt.Sprintf("errno %d (%v)", v&0xffff, unix.Errno(v&0xffff))
	}
	return fmt.Sprintf("%#x", v)
}

// probeValues are the argument values the filters tell apart: each
// constant they compare with, its neighbours, and those with bits set
// above the 32 an int argument has.
func probeValues(progs ...[]unix.SockFilter) []uint64 {
	seen := map[uint64]bool{}
	for _, prog := range progs {
		for _, ins := range prog {
			if ins.Code&0x07 == unix.BPF_JMP || ins.Code == unix.BPF_ALU|unix.BPF_AND|unix.BPF_K {
				for _, v := range []uint32{ins.K, ins.K - 1, ins.K + 1} {
					seen[uint64(v)], seen[1<<32|uint64(v)], seen[0xffffffff<<32|uint64(v)] = true, true, true
				}
			}
		}
	}
	out := make([]uint64, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// abis are the x86 ABIs a filter sees: x86_64, x32 (x86_64 numbers with
// bit 30) and i386.
var abis = []struct{ arch, bit uint32 }{{auditArchX86_64, 0}, {auditArchX86_64, x32Bit}, {auditArchI386, 0}}

// argReaders are the syscalls (0-1023 on each ABI) whose verdict reads an
// argument in any of progs.
func argReaders(t *testing.T, progs ...[]unix.SockFilter) []verdictKey {
	t.Helper()
	var out []verdictKey
	for _, abi := range abis {
		for nr := uint32(0); nr < 1024; nr++ {
			for _, prog := range progs {
				_, reads, err := runFilter(prog, abi.arch, abi.bit|nr, [6]uint64{})
				if err != nil {
					t.Fatal(err)
				}
				if reads {
					out = append(out, verdictKey{arch: abi.arch, nr: abi.bit | nr})
					break
				}
			}
		}
	}
	return out
}

// verdicts runs prog for syscalls 0-1023 on each ABI with all arguments
// 0, and for the readers, with each probe value in each argument.
func verdicts(t *testing.T, prog []unix.SockFilter, readers []verdictKey, probes []uint64) map[verdictKey]uint32 {
	t.Helper()
	out := map[verdictKey]uint32{}
	run := func(k verdictKey, args [6]uint64) {
		v, _, err := runFilter(prog, k.arch, k.nr, args)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	for _, abi := range abis {
		for nr := uint32(0); nr < 1024; nr++ {
			run(verdictKey{abi.arch, abi.bit | nr, -1, 0}, [6]uint64{})
		}
	}
	for _, r := range readers {
		for i := range 6 {
			for _, val := range probes {
				var args [6]uint64
				args[i] = val
				run(verdictKey{r.arch, r.nr, i, val}, args)
			}
		}
	}
	return out
}

// runFilter interprets a classic BPF seccomp program over struct
// seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];} (native order),
// and says whether it read an argument.
func runFilter(prog []unix.SockFilter, arch, nr uint32, args [6]uint64) (uint32, bool, error) {
	var data [64]byte
	binary.LittleEndian.PutUint32(data[0:], nr)
	binary.LittleEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var a, x uint32
	var mem [16]uint32
	readsArgs := false
	for pc := 0; pc < len(prog); {
		ins := prog[pc]
		pc++
		jump := func(cond bool) {
			if cond {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		}
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if ins.K > 60 || ins.K%4 != 0 {
				return 0, false, fmt.Errorf("bpf: load at %d", ins.K)
			}
			a = binary.LittleEndian.Uint32(data[ins.K:])
			readsArgs = readsArgs || ins.K >= 16
		case unix.BPF_LD | unix.BPF_IMM:
			a = ins.K
		case unix.BPF_LD | unix.BPF_MEM:
			a = mem[ins.K&15]
		case unix.BPF_LDX | unix.BPF_IMM:
			x = ins.K
		case unix.BPF_LDX | unix.BPF_MEM:
			x = mem[ins.K&15]
		case unix.BPF_ST:
			mem[ins.K&15] = a
		case unix.BPF_STX:
			mem[ins.K&15] = x
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= ins.K
		case unix.BPF_ALU | unix.BPF_OR | unix.BPF_K:
			a |= ins.K
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(ins.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			jump(a == ins.K)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			jump(a > ins.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			jump(a >= ins.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			jump(a&ins.K != 0)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_X:
			jump(a == x)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_X:
			jump(a > x)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_X:
			jump(a >= x)
		case unix.BPF_RET | unix.BPF_K:
			return ins.K, readsArgs, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, readsArgs, nil
		default:
			return 0, false, fmt.Errorf("bpf: opcode %#x at %d not interpreted", ins.Code, pc-1)
		}
	}
	return 0, false, errors.New("bpf: ran off the end")
}

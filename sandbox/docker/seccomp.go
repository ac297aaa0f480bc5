package docker

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Every container runs under Docker's default seccomp profile, as
// moby/profiles publishes it (the source of current Docker daemons'
// built-in default), with
// one change: ioctl cannot create btrfs subvolumes or snapshots. A
// subvolume gets a quota group of its own, outside the container's
// disk_mb limit (disk.go), and any user may make one.
//
// The profile is passed whole (SecurityOpt "seccomp=<json>"), so an older
// daemon's built-in default does not apply. Against the built-in default
// of Debian 12's 20.10 daemon (what CI runs) it refuses more: io_uring,
// AF_ALG, AF_VSOCK and unknown socket families, and
// set_mempolicy_home_node (EPERM, was ENOSYS); and it allows
// name_to_handle_at, process_vm_readv and process_vm_writev (as ptrace of
// the container's own processes is), pkey_mprotect, pkey_alloc, pkey_free,
// and cachestat, fchmodat2, map_shadow_stack, futex_wake, futex_wait and
// futex_requeue, which that daemon answers ENOSYS (x32: EPERM), as it
// predates them. TestSeccompFilter measures both, from the filters the
// kernel holds.
//
// The refusal cannot be a conditional ERRNO rule next to the profile's
// unconditional ioctl allow: libseccomp keeps the unconditional rule and
// drops the other. Nor can it be one allow rule with a "not equal" per
// request: runc splits comparisons of the same argument into separate
// rules, which it ORs. So ioctl leaves the unconditional list and gets
// allow rules, one masked comparison each, whose union is every request
// but the refused ones; those fall to the profile's default action, EPERM.
// The comparisons mask the request to its low 32 bits, as the kernel
// reads it (an unsigned int): a request with high bits set is refused too.

// refusedIoctls are the requests that create a btrfs subvolume
// (linux/btrfs.h: _IOW(0x94, nr, struct btrfs_ioctl_vol_args{,_v2})).
var refusedIoctls = []uint32{
	0x50009401, // BTRFS_IOC_SNAP_CREATE
	0x5000940E, // BTRFS_IOC_SUBVOL_CREATE
	0x50009417, // BTRFS_IOC_SNAP_CREATE_V2
	0x50009418, // BTRFS_IOC_SUBVOL_CREATE_V2
}

// seccompReport is how the isolation report names the profile.
const seccompReport = "seccomp: Docker's default profile (moby/profiles) plus EPERM for the ioctls that create btrfs subvolumes and snapshots"

// seccompProfile returns the profile's JSON, for SecurityOpt.
func seccompProfile() (string, error) {
	p := seccomp.DefaultProfile()
	allowed := false
	for _, s := range p.Syscalls {
		if !slices.Contains(s.Names, "ioctl") && s.Name != "ioctl" {
			continue
		}
		if s.Action != specs.ActAllow || len(s.Args) > 0 || s.Includes != nil || s.Excludes != nil {
			// A rule this code does not know how to combine with.
			return "", fmt.Errorf("building the docker sandbox seccomp profile: Docker's default profile has a conditional ioctl rule (%s %v); the btrfs subvolume refusal must be revised for it", s.Action, s.Args)
		}
		s.Names = slices.DeleteFunc(s.Names, func(n string) bool { return n == "ioctl" })
		if s.Name == "ioctl" {
			s.Name = ""
		}
		allowed = true
	}
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(s *seccomp.Syscall) bool { return len(s.Names) == 0 && s.Name == "" })
	if !allowed {
		return "", fmt.Errorf("building the docker sandbox seccomp profile: Docker's default profile no longer allows ioctl; the btrfs subvolume refusal must be revised for it")
	}
	for _, c := range complementPatterns(refusedIoctls) {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
			Names:  []string{"ioctl"},
			Action: specs.ActAllow,
			// SCMP_CMP_MASKED_EQ: (arg & Value) == ValueTwo.
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: uint64(c.mask), ValueTwo: uint64(c.value), Op: specs.OpMaskedEqual}},
		}})
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encoding the docker sandbox seccomp profile: %w", err)
	}
	return string(b), nil
}

// pattern matches the 32-bit values v with v&mask == value.
type pattern struct{ mask, value uint32 }

// complementPatterns returns disjoint patterns that together match every
// 32-bit value except those in refused: walking the binary trie of the
// refused values from the top bit, each branch no refused value takes is
// one pattern (about 32 per refused value, fewer when they share bits).
func complementPatterns(refused []uint32) []pattern {
	var out []pattern
	var walk func(prefix uint32, bits int, set []uint32)
	walk = func(prefix uint32, bits int, set []uint32) {
		switch {
		case len(set) == 0:
			var mask uint32
			if bits > 0 {
				mask = ^uint32(0) << (32 - bits)
			}
			out = append(out, pattern{mask, prefix})
		case bits < 32: // at 32 bits, prefix is a refused value
			bit := uint32(1) << (31 - bits)
			var zero, one []uint32
			for _, v := range set {
				if v&bit == 0 {
					zero = append(zero, v)
				} else {
					one = append(one, v)
				}
			}
			walk(prefix, bits+1, zero)
			walk(prefix|bit, bits+1, one)
		}
	}
	walk(0, 0, refused)
	return out
}

package execserver

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"evals.si/sandbox/internal/execuser"
)

// execUser is who a command with ExecMsg.Spec runs as.
type execUser struct {
	uid, gid int
	groups   []int // supplementary groups
	home     string
}

// lookupUser resolves a docker exec -u spec from the sandbox's own
// /etc/passwd and /etc/group (etc is "/etc" inside the sandbox), read
// here, inside the sandbox, with docker's rules and words (execuser.Lookup).
func lookupUser(spec, etc string) (execUser, error) {
	u, err := execuser.Lookup(spec, etc)
	if err != nil {
		return execUser{}, err
	}
	return execUser{uid: u.Uid, gid: u.Gid, groups: u.Sgids, home: u.Home}, nil
}

// credential is how the command is forked to run as u: nil when u is who
// the server already is (the only choice in a single-id namespace, which
// leaves the server no capability to switch). Every id must be one the
// sandbox's user namespace maps: the kernel would refuse the others, and
// what it means must be said.
func (u execUser) credential(spec string) (*syscall.Credential, error) {
	ids := map[string][]int{"uid_map": {u.uid}, "gid_map": append([]int{u.gid}, u.groups...)}
	for _, file := range []string{"uid_map", "gid_map"} {
		b, err := os.ReadFile("/proc/self/" + file)
		if err != nil {
			return nil, fmt.Errorf("user %q: reading the sandbox's %s: %w", spec, file, err)
		}
		for _, id := range ids[file] {
			if !mapped(string(b), id) {
				return nil, fmt.Errorf("user %q: id %d is outside the ids this sandbox's user namespace maps (%s: %s); with a single-id map (an engine without a subordinate id range in /etc/subuid) no other user can run",
					spec, id, file, strings.Join(strings.Fields(string(b)), " "))
			}
		}
	}
	if u.uid == os.Getuid() && u.gid == os.Getgid() {
		// Without CAP_SETGID (a single-id namespace) the groups are
		// what bwrap left, which cannot change: the host's, unmapped.
		cur, _ := syscall.Getgroups()
		if slices.Equal(cur, u.groups) || (len(u.groups) == 0 && len(cur) == 0) || !hasCap(capSetgid) {
			return nil, nil
		}
	}
	groups := make([]uint32, len(u.groups))
	for i, g := range u.groups {
		groups[i] = uint32(g)
	}
	return &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: groups}, nil
}

// mapped reports whether id is inside one of a uid_map's ranges.
func mapped(idmap string, id int) bool {
	for _, line := range strings.Split(idmap, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil && id >= in && id-in < n {
			return true
		}
	}
	return false
}

const capSetgid = 6

// hasCap reports whether the server holds capability n (effective).
func hasCap(n uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<n) != 0
		}
	}
	return false
}

package execproto

import (
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
	if err := execuser.CheckMapped(spec, u.uid, append([]int{u.gid}, u.groups...)); err != nil {
		return nil, err
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

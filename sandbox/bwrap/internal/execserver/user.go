package execserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// execUser is who a command with ExecMsg.Spec runs as.
type execUser struct {
	uid, gid int
	groups   []int // supplementary groups
	home     string
	// named: the spec matched a passwd entry.
	named bool
}

// maxID is the largest id runc accepts (it refuses 2^31 and above).
const maxID = 1<<31 - 1

// lookupUser resolves a docker exec -u spec ("name", "uid", "name:group",
// "uid:gid", "uid:group"…) from the sandbox's own /etc/passwd and
// /etc/group, read here, inside the sandbox, as runc's GetExecUser (which
// docker exec uses) does: a passwd entry gives the uid, primary gid and
// HOME; a numeric uid without one runs with gid 0 and HOME=/; an explicit
// group replaces the primary gid and then there are no supplementary
// groups, otherwise those are the groups listing the user's name. Errors
// use Docker's words.
func lookupUser(spec, etc string) (execUser, error) {
	userArg, groupArg, _ := strings.Cut(spec, ":")
	groupArg, _, _ = strings.Cut(groupArg, ":")
	u := execUser{home: "/"}
	uidArg, uidErr := strconv.Atoi(userArg)
	gidArg, gidErr := strconv.Atoi(groupArg)

	passwd, err := readDB(etc + "/passwd")
	if err != nil {
		return u, err
	}
	name := ""
	for _, f := range passwd {
		if len(f) < 3 {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		if (uidErr == nil && id == uidArg) || (uidErr != nil && f[0] == userArg) {
			// The first match wins, as in runc.
			name, u.uid, u.named = f[0], id, true
			if len(f) > 3 {
				u.gid, _ = strconv.Atoi(f[3])
			}
			if len(f) > 5 {
				u.home = f[5]
			}
			break
		}
	}
	if !u.named {
		if uidErr != nil {
			return u, fmt.Errorf("unable to find user %s: no matching entries in passwd file", userArg)
		}
		if uidArg < 0 || uidArg > maxID {
			return u, fmt.Errorf("user %s: uids and gids must be in range 0-%d", userArg, maxID)
		}
		u.uid = uidArg
	}
	if groupArg == "" && !u.named {
		return u, nil
	}
	groups, err := readDB(etc + "/group")
	if err != nil {
		return u, err
	}
	if groupArg != "" {
		found := false
		for _, f := range groups {
			if len(f) < 3 {
				continue
			}
			id, err := strconv.Atoi(f[2])
			if err != nil {
				continue
			}
			if (gidErr == nil && id == gidArg) || (gidErr != nil && f[0] == groupArg) {
				u.gid, found = id, true
				break
			}
		}
		if !found {
			if gidErr != nil {
				return u, fmt.Errorf("unable to find group %s: no matching entries in group file", groupArg)
			}
			if gidArg < 0 || gidArg > maxID {
				return u, fmt.Errorf("group %s: uids and gids must be in range 0-%d", groupArg, maxID)
			}
			u.gid = gidArg
		}
		return u, nil
	}
	for _, f := range groups {
		if len(f) < 4 {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(f[3], ","), name) && !slices.Contains(u.groups, id) {
			u.groups = append(u.groups, id)
		}
	}
	return u, nil
}

// maxDB caps what readDB reads of a passwd or group file.
const maxDB = 16 << 20

// readDB reads a colon-separated database (passwd, group) as fields per
// line; a missing file is empty, as runc takes it. The sandbox's root
// owns the file: a FIFO, a device, a /proc file (the server's own pipes
// to the host are there) or a huge file must not block or exhaust the
// server, so only a regular file outside /proc is read, and at most maxDB.
func readDB(path string) ([][]string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", path, err)
	}
	defer f.Close()
	var fs syscall.Statfs_t
	st, err := f.Stat()
	if err == nil {
		err = syscall.Fstatfs(int(f.Fd()), &fs)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading %s in the sandbox: %w", path, err)
	case !st.Mode().IsRegular() || fs.Type == procSuperMagic:
		return nil, fmt.Errorf("reading %s in the sandbox: not a regular file (%s)", path, st.Mode().Type())
	case st.Size() > maxDB:
		return nil, fmt.Errorf("reading %s in the sandbox: %d bytes, more than the %d MiB a user database may have", path, st.Size(), maxDB>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDB))
	if err != nil {
		return nil, fmt.Errorf("reading %s in the sandbox: %w", path, err)
	}
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, nil
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

const (
	capSetgid      = 6
	procSuperMagic = 0x9fa0
)

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

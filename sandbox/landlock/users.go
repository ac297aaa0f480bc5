package landlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A command's ExecRequest.User is resolved by its launcher, inside the
// sandbox's root, from the sandbox's own /etc/passwd and /etc/group (the
// image's, after setup's useradd), with the rules of docker exec -u (runc's
// user.GetExecUser): "name" or "uid", optionally ":group" or ":gid". The
// restricter then sets the ids before it execs.

// cred is who a command runs as.
type cred struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups,omitempty"`
	Home   string `json:"home"`
}

// passwdEntry and groupEntry are the fields of /etc/passwd and /etc/group
// lines that resolution uses.
type passwdEntry struct {
	name     string
	uid, gid int
	home     string
}

type groupEntry struct {
	name    string
	gid     int
	members []string
}

// maxIDFile bounds what is read of /etc/passwd and /etc/group: the
// sandbox controls them (one could be a link to /dev/zero).
const maxIDFile = 8 << 20

// resolveUser resolves spec against the passwd and group files of the
// root the caller is in.
func resolveUser(spec string) (cred, error) {
	passwd, err := readIDFile("/etc/passwd")
	if err != nil {
		return cred{}, err
	}
	group, err := readIDFile("/etc/group")
	if err != nil {
		return cred{}, err
	}
	return lookupUser(spec, parsePasswd(passwd), parseGroup(group))
}

// readIDFile reads a regular file of the sandbox, at most maxIDFile bytes;
// a missing one is empty, as for runc.
func readIDFile(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the sandbox's %s: %w", p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("reading the sandbox's %s: not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxIDFile))
	if err != nil {
		return "", fmt.Errorf("reading the sandbox's %s: %w", p, err)
	}
	return string(b), nil
}

func idLines(s string) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, maxIDFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

func parsePasswd(s string) []passwdEntry {
	var out []passwdEntry
	for _, f := range idLines(s) {
		if len(f) < 4 {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		e := passwdEntry{name: f[0], uid: uid, gid: gid}
		if len(f) > 5 {
			e.home = f[5]
		}
		out = append(out, e)
	}
	return out
}

func parseGroup(s string) []groupEntry {
	var out []groupEntry
	for _, f := range idLines(s) {
		if len(f) < 3 {
			continue
		}
		gid, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		e := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 && f[3] != "" {
			e.members = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out
}

// lookupUser applies docker exec -u's rules: a user matches by name, or
// by uid when numeric; a numeric uid without an entry runs with gid 0 and
// HOME=/; an explicit group (name, or gid with or without an entry) sets
// the primary group and no supplementary ones, otherwise the primary group
// is passwd's and the supplementary groups are those listing the user.
func lookupUser(spec string, passwd []passwdEntry, group []groupEntry) (cred, error) {
	userArg, groupArg, _ := strings.Cut(spec, ":")
	if userArg == "" {
		// ":group" keeps root, as runc's default user.
		userArg = "0"
	}
	c := cred{Home: "/"}
	name := ""
	uid, uidErr := strconv.Atoi(userArg)
	if uidErr == nil && uid < 0 {
		return cred{}, fmt.Errorf("invalid user %q: negative uid", spec)
	}
	found := false
	for _, e := range passwd {
		if (uidErr != nil && e.name == userArg) || (uidErr == nil && e.uid == uid) {
			c.UID, c.GID, name, found = e.uid, e.gid, e.name, true
			if e.home != "" {
				c.Home = e.home
			}
			break
		}
	}
	if !found {
		if uidErr != nil {
			return cred{}, fmt.Errorf("unable to find user %s: no matching entries in passwd file", userArg)
		}
		c.UID = uid
	}
	if groupArg != "" {
		gid, gidErr := strconv.Atoi(groupArg)
		matched := false
		if gidErr != nil {
			for _, g := range group {
				if g.name == groupArg {
					c.GID, matched = g.gid, true
					break
				}
			}
			if !matched {
				return cred{}, fmt.Errorf("unable to find group %s: no matching entries in group file", groupArg)
			}
		} else {
			if gid < 0 {
				return cred{}, fmt.Errorf("invalid group %q: negative gid", groupArg)
			}
			c.GID = gid
		}
		return c, nil
	}
	if name != "" {
		for _, g := range group {
			for _, m := range g.members {
				if m == name {
					c.Groups = append(c.Groups, g.gid)
					break
				}
			}
		}
	}
	return c, nil
}

// checkMapped refuses ids the launcher's user namespace does not map: the
// kernel would refuse them too, with EINVAL; this says why.
func checkMapped(c cred) error {
	uids, err := insideRanges("/proc/self/uid_map")
	if err != nil {
		return err
	}
	gids, err := insideRanges("/proc/self/gid_map")
	if err != nil {
		return err
	}
	if !inRanges(uids, c.UID) {
		return fmt.Errorf("uid %d is outside the sandbox's user namespace map (inside ids %s)", c.UID, describeRanges(uids))
	}
	for _, g := range append([]int{c.GID}, c.Groups...) {
		if !inRanges(gids, g) {
			return fmt.Errorf("gid %d is outside the sandbox's user namespace map (inside ids %s)", g, describeRanges(gids))
		}
	}
	return nil
}

func insideRanges(file string) ([][2]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's id map: %w", err)
	}
	var out [][2]int
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		first, err1 := strconv.Atoi(f[0])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			out = append(out, [2]int{first, first + n - 1})
		}
	}
	return out, nil
}

func inRanges(rs [][2]int, id int) bool {
	for _, r := range rs {
		if id >= r[0] && id <= r[1] {
			return true
		}
	}
	return false
}

func describeRanges(rs [][2]int) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%d-%d", r[0], r[1]))
	}
	return strings.Join(s, ",")
}

// setCred switches the calling thread (the one that execs) to c. Changing
// every uid away from 0 clears the permitted and effective capabilities, as
// for a non-root user in a container. setgroups is skipped only where the
// namespace forbids it (a map of root alone) and c needs no groups.
func setCred(c cred) error {
	groups := c.Groups
	if groups == nil {
		groups = []int{}
	}
	if err := unix.Setgroups(groups); err != nil {
		denied := false
		if b, rerr := os.ReadFile("/proc/self/setgroups"); rerr == nil && strings.TrimSpace(string(b)) == "deny" {
			denied = true
		}
		if !denied || len(c.Groups) > 0 {
			return fmt.Errorf("setgroups %v: %w", c.Groups, err)
		}
	}
	if err := unix.Setresgid(c.GID, c.GID, c.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", c.GID, err)
	}
	if err := unix.Setresuid(c.UID, c.UID, c.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", c.UID, err)
	}
	return nil
}

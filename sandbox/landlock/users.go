package landlock

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/internal/execuser"
)

// A command's ExecRequest.User is resolved by its launcher, inside the
// sandbox's root, from the sandbox's own /etc/passwd and /etc/group (the
// image's, after setup's useradd), with the rules and words of docker
// exec -u (execuser.Lookup). The restricter then sets the ids before it
// execs.

// cred is who a command runs as.
type cred struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups,omitempty"`
	Home   string `json:"home"`
}

// resolveUser resolves spec against the passwd and group files of the
// root the caller is in.
func resolveUser(spec string) (cred, error) {
	return lookupUser(spec, "/etc")
}

// lookupUser resolves spec against etc's passwd and group files.
func lookupUser(spec, etc string) (cred, error) {
	u, err := execuser.Lookup(spec, etc)
	if err != nil {
		return cred{}, err
	}
	return cred{UID: u.Uid, GID: u.Gid, Groups: u.Sgids, Home: u.Home}, nil
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

package dockerfile

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Users and owners: USER makes steps run as a user, and COPY --chown and
// WORKDIR after USER give what they create an owner. Owners are resolved
// in the sandbox when the step runs, in the image's own /etc/passwd and
// /etc/group, as BuildKit resolves them when it builds.

// isRoot reports a user spec that is root with root's group.
func isRoot(u string) bool {
	switch u {
	case "", "root", "0", "root:root", "0:0", "root:0", "0:root":
		return true
	}
	return false
}

// stepUser is the user a RUN step names: empty for root.
func stepUser(u string) string {
	if isRoot(u) {
		return ""
	}
	return u
}

// ownerCmd is shell code setting o to uid:gid for the user spec u[:g] as
// BuildKit's chown resolves it in the image at that point: a name from
// /etc/passwd (uid and its primary gid; 0:0 when absent), a number as
// both uid and gid; then a group name from /etc/group (kept when absent)
// or a gid.
func ownerCmd(spec string) string {
	u, g, _ := strings.Cut(spec, ":")
	var b strings.Builder
	switch {
	case u == "root":
		b.WriteString("o=0:0")
	case isNumber(u):
		fmt.Fprintf(&b, "o=%s:%s", u, u)
	default:
		fmt.Fprintf(&b, `o=$(awk -F: -v n=%s '$1==n{print $3":"$4; f=1; exit} END{if(!f)print "0:0"}' /etc/passwd)`, Quote(u))
	}
	switch {
	case g == "":
	case g == "root":
		b.WriteString("; o=${o%:*}:0")
	case isNumber(g):
		fmt.Fprintf(&b, "; o=${o%%:*}:%s", g)
	default:
		fmt.Fprintf(&b, `; g=$(awk -F: -v n=%s '$1==n{print $3; exit}' /etc/group); if [ -n "$g" ]; then o=${o%%:*}:$g; fi`, Quote(g))
	}
	return b.String()
}

func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// chownCmd chowns paths (with flags) to the user spec, resolved when the
// step runs.
func chownCmd(spec string, paths []string, flags ...string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = Quote(p)
	}
	return ownerCmd(spec) + "; chown " + strings.Join(append(flags, `"$o"`), " ") + " " + strings.Join(q, " ")
}

// isBaseDir reports a directory base images have, often empty (/opt,
// /srv): holding only what a COPY placed does not make it the WORKDIR's.
func isBaseDir(d string) bool {
	switch d {
	case "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
		"/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
		"/usr", "/var", "/usr/bin", "/usr/lib", "/usr/libexec", "/usr/sbin", "/usr/share",
		"/usr/src", "/usr/include", "/usr/local", "/usr/local/bin", "/usr/local/etc",
		"/usr/local/games", "/usr/local/include", "/usr/local/lib", "/usr/local/libexec",
		"/usr/local/man", "/usr/local/sbin", "/usr/local/share", "/usr/local/src",
		"/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log",
		"/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp", "/var/www":
		return true
	}
	return false
}

// mkdirOwned creates a WORKDIR's directory as BuildKit does: with its
// missing parents, owned by the user in force when one is set. Since files
// are placed before the first step, a later COPY may already have created
// the directory or some of its parents: going up from the deepest one that
// exists, each that holds exactly what later COPYs placed in it counts as
// created by this WORKDIR too, up to the directories base images have.
func (t *translator) mkdirOwned(m mkdirStep) string {
	if isRoot(m.user) {
		return "mkdir -p " + Quote(m.dir)
	}
	var cases []string
	for d := m.dir; d != "/" && !isBaseDir(d); d = path.Dir(d) {
		if seq, ok := t.placedDirs[d]; !ok || seq < m.seq {
			continue
		}
		var names []string
		for p := range t.files {
			if path.Dir(p) == d {
				names = append(names, path.Base(p))
			}
		}
		for p, seq := range t.placedDirs {
			if path.Dir(p) == d && seq >= m.seq {
				names = append(names, path.Base(p))
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = Quote(n)
		}
		cases = append(cases, fmt.Sprintf("%s) printf '%%s\\n' %s;;", Quote(d), strings.Join(q, " ")))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `set -e; %s; d=%s; top=; while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done; `, ownerCmd(m.user), Quote(m.dir))
	if len(cases) > 0 {
		// placed DIR lists what later COPYs placed directly in DIR.
		fmt.Fprintf(&b, `placed() { case "$1" in %s *) return 1;; esac; }; while placed "$d" >/dev/null && [ "$(ls -A "$d" | LC_ALL=C sort)" = "$(placed "$d" | LC_ALL=C sort)" ]; do chown "$o" "$d"; d=$(dirname "$d"); done; `, strings.Join(cases, " "))
	}
	fmt.Fprintf(&b, `mkdir -p %s; if [ -n "$top" ]; then chown -R "$o" "$top"; fi`, Quote(m.dir))
	return b.String()
}

package execuser

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/user"
)

// Lookup against runc's GetExecUser rules (docker exec -u), on one
// passwd and group file with near misses, comments and a duplicate name.
func TestLookupRunc(t *testing.T) {
	etc := t.TempDir()
	os.WriteFile(filepath.Join(etc, "passwd"), []byte(`root:x:0:0:root:/root:/bin/bash
# a comment
agentx:x:1001:1001::/home/agentx:/bin/sh
agent:x:1000:1000:Agent:/home/agent:/bin/sh
agent:x:1002:1002::/elsewhere:/bin/sh
nohome:x:1003:1003
`), 0o644)
	os.WriteFile(filepath.Join(etc, "group"), []byte(`root:x:0:
agent:x:1000:
staff:x:50:agent,other
near:x:60:agentx,xagent
docker:x:999:agent
`), 0o644)
	for _, tc := range []struct {
		spec string
		want user.ExecUser
		err  string
	}{
		{spec: "agent", want: user.ExecUser{Uid: 1000, Gid: 1000, Sgids: []int{50, 999}, Home: "/home/agent"}},
		{spec: "1000", want: user.ExecUser{Uid: 1000, Gid: 1000, Sgids: []int{50, 999}, Home: "/home/agent"}},
		{spec: "agent:staff", want: user.ExecUser{Uid: 1000, Gid: 50, Home: "/home/agent"}},
		{spec: "agent:77", want: user.ExecUser{Uid: 1000, Gid: 77, Home: "/home/agent"}},
		{spec: "root", want: user.ExecUser{Uid: 0, Gid: 0, Home: "/root"}},
		{spec: "nohome", want: user.ExecUser{Uid: 1003, Gid: 1003, Home: "/"}},
		{spec: "5000", want: user.ExecUser{Uid: 5000, Gid: 0, Home: "/"}},
		{spec: "5000:5001", want: user.ExecUser{Uid: 5000, Gid: 5001, Home: "/"}},
		{spec: "5000:staff", want: user.ExecUser{Uid: 5000, Gid: 50, Home: "/"}},
		{spec: "nosuch", err: "unable to find user nosuch: no matching entries in passwd file"},
		{spec: "agen", err: "unable to find user agen: no matching entries in passwd file"},
		{spec: "agent:nosuch", err: "unable to find group nosuch: no matching entries in group file"},
		{spec: "-1", err: "must be in range"},
		{spec: "5000:4294967296", err: "must be in range"},
	} {
		got, err := Lookup(tc.spec, etc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %+v, %v; want error %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.Uid != tc.want.Uid || got.Gid != tc.want.Gid || got.Home != tc.want.Home || !slices.Equal(got.Sgids, tc.want.Sgids) {
			t.Errorf("%q: %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	// No passwd file at all: numeric ids still run, names cannot.
	empty := t.TempDir()
	if u, err := Lookup("42:43", empty); err != nil || u.Uid != 42 || u.Gid != 43 {
		t.Errorf("numeric user without passwd: %+v, %v", u, err)
	}
	if _, err := Lookup("agent", empty); err == nil {
		t.Errorf("named user without passwd: no error")
	}
}

// Lookup against docker exec -u's rules, on passwd and group files
// with near misses, a comment, a broken line and a user named like a uid.
func TestLookupDocker(t *testing.T) {
	etc := t.TempDir()
	for name, content := range map[string]string{
		"passwd": `root:x:0:0:root:/root:/bin/bash
# a comment
evuser:x:4242:4243::/home/evuser:/bin/sh
evuserx:x:4250:4250::/home/x:/bin/sh
2000:x:3000:3000::/home/numeric:/bin/sh
broken line
`,
		"group": `root:x:0:
evuser:x:4243:
evextra:x:4244:evuserx,evuser
evnear:x:4245:evuserx
4299name:x:4246:
`,
	} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		spec string
		want user.ExecUser
		err  string
	}{
		{spec: "evuser", want: user.ExecUser{Uid: 4242, Gid: 4243, Sgids: []int{4244}, Home: "/home/evuser"}},
		{spec: "4242", want: user.ExecUser{Uid: 4242, Gid: 4243, Sgids: []int{4244}, Home: "/home/evuser"}},
		{spec: "root", want: user.ExecUser{Uid: 0, Gid: 0, Home: "/root"}},
		// An explicit group replaces the primary group and drops the
		// supplementary ones, as runc does.
		{spec: "evuser:evextra", want: user.ExecUser{Uid: 4242, Gid: 4244, Home: "/home/evuser"}},
		{spec: "evuser:4299", want: user.ExecUser{Uid: 4242, Gid: 4299, Home: "/home/evuser"}},
		{spec: "4300", want: user.ExecUser{Uid: 4300, Gid: 0, Home: "/"}},
		{spec: "4300:4301", want: user.ExecUser{Uid: 4300, Gid: 4301, Home: "/"}},
		{spec: "4300:evnear", want: user.ExecUser{Uid: 4300, Gid: 4245, Home: "/"}},
		{spec: ":4301", want: user.ExecUser{Uid: 0, Gid: 4301, Home: "/root"}},
		// A numeric spec matches a uid, never a name.
		{spec: "2000", want: user.ExecUser{Uid: 2000, Gid: 0, Home: "/"}},
		{spec: "nosuchuser", err: "unable to find user nosuchuser: no matching entries in passwd file"},
		{spec: "evuse", err: "unable to find user evuse"},
		{spec: "evuser:nosuchgroup", err: "unable to find group nosuchgroup: no matching entries in group file"},
		{spec: "-1", err: "uids and gids must be in range"},
		{spec: "4300:2147483648", err: "uids and gids must be in range"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := Lookup(tc.spec, etc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Lookup(%q) = %+v, %v; want error %q", tc.spec, got, err, tc.err)
				}
				return
			}
			if err != nil || got.Uid != tc.want.Uid || got.Gid != tc.want.Gid || got.Home != tc.want.Home || !slices.Equal(got.Sgids, tc.want.Sgids) {
				t.Fatalf("Lookup(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
			}
		})
	}
}

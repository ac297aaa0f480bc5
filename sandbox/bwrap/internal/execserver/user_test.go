package execserver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lookupUser against runc's GetExecUser rules (docker exec -u), on one
// passwd and group file with near misses, comments and a duplicate name.
func TestLookupUser(t *testing.T) {
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
		want execUser
		err  string
	}{
		{spec: "agent", want: execUser{uid: 1000, gid: 1000, groups: []int{50, 999}, home: "/home/agent"}},
		{spec: "1000", want: execUser{uid: 1000, gid: 1000, groups: []int{50, 999}, home: "/home/agent"}},
		{spec: "agent:staff", want: execUser{uid: 1000, gid: 50, home: "/home/agent"}},
		{spec: "agent:77", want: execUser{uid: 1000, gid: 77, home: "/home/agent"}},
		{spec: "root", want: execUser{uid: 0, gid: 0, home: "/root"}},
		{spec: "nohome", want: execUser{uid: 1003, gid: 1003, home: "/"}},
		{spec: "5000", want: execUser{uid: 5000, gid: 0, home: "/"}},
		{spec: "5000:5001", want: execUser{uid: 5000, gid: 5001, home: "/"}},
		{spec: "5000:staff", want: execUser{uid: 5000, gid: 50, home: "/"}},
		{spec: "nosuch", err: "unable to find user nosuch: no matching entries in passwd file"},
		{spec: "agen", err: "unable to find user agen: no matching entries in passwd file"},
		{spec: "agent:nosuch", err: "unable to find group nosuch: no matching entries in group file"},
		{spec: "-1", err: "must be in range"},
		{spec: "5000:4294967296", err: "must be in range"},
	} {
		got, err := lookupUser(tc.spec, etc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %+v, %v; want error %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.uid != tc.want.uid || got.gid != tc.want.gid || got.home != tc.want.home || !slices.Equal(got.groups, tc.want.groups) {
			t.Errorf("%q: %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	// No passwd file at all: numeric ids still run, names cannot.
	empty := t.TempDir()
	if u, err := lookupUser("42:43", empty); err != nil || u.uid != 42 || u.gid != 43 {
		t.Errorf("numeric user without passwd: %+v, %v", u, err)
	}
	if _, err := lookupUser("agent", empty); err == nil {
		t.Errorf("named user without passwd: no error")
	}
}

func TestMapped(t *testing.T) {
	m := "         0     100000      65536\n     65536 1000 1\n"
	for id, want := range map[int]bool{0: true, 65535: true, 65536: true, 65537: false, -1: false} {
		if got := mapped(m, id); got != want {
			t.Errorf("mapped(%d) = %v, want %v", id, got, want)
		}
	}
}

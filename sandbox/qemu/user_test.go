package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// TestDefaultID: QEMU's id is outside every range something else owns.
func TestDefaultID(t *testing.T) {
	ranges := []struct {
		name     string
		from, to int64 // inclusive
	}{
		{"system and login users", 0, 60000},
		{"systemd's homed, dynamic users, nobody", 60001, 65535},
		{"systemd's container range", 524288, 1879048191},
		{"the sandboxes' subordinate range", sandbox.SubordinateIDBase, sandbox.SubordinateIDBase + sandbox.SubordinateIDCount - 1},
		{"systemd's foreign range", 0x7ffe0000, 0x7ffeffff},
		{"ids tools may read as negative", 1 << 31, 1<<32 - 1},
	}
	for _, r := range ranges {
		if DefaultID >= r.from && DefaultID <= r.to {
			t.Errorf("DefaultID %d is in %s (%d–%d)", DefaultID, r.name, r.from, r.to)
		}
	}
	// Nobody on this host has it.
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Split(line, ":"); len(f) > 2 && f[2] == fmt.Sprint(DefaultID) {
				t.Errorf("%s names DefaultID %d: %q", file, DefaultID, line)
			}
		}
	}
}

func TestCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the test makes a device node")
	}
	kvm := filepath.Join(t.TempDir(), "kvm")
	if err := syscall.Mknod(kvm, syscall.S_IFCHR|0o660, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	os.Chmod(kvm, 0o660)
	os.Chown(kvm, 0, 4242)
	cases := []struct {
		name             string
		euid, egid       int
		wantUID, wantGID int
		accel            string
		want             string // credString of the result
		wantErr          string
	}{
		{name: "root, default ids", accel: "tcg", want: fmt.Sprintf("%d:%d groups []", DefaultID, DefaultID)},
		{name: "root, ids set", wantUID: 5000, wantGID: 5001, accel: "tcg", want: "5000:5001 groups []"},
		{name: "root, uid set", wantUID: 5000, accel: "tcg", want: fmt.Sprintf("5000:%d groups []", DefaultID)},
		{name: "root under kvm", accel: "kvm", want: fmt.Sprintf("%d:%d groups [4242]", DefaultID, DefaultID)},
		{name: "not root", euid: 1000, egid: 1000, accel: "kvm", want: "the engine's user"},
		{name: "not root, its own ids", euid: 1000, egid: 1000, wantUID: 1000, wantGID: 1000, accel: "tcg", want: "the engine's user"},
		{name: "not root, other ids", euid: 1000, egid: 1000, wantUID: 5000, accel: "tcg", wantErr: "cannot change user"},
		{name: "negative", wantGID: -1, accel: "tcg", wantErr: "not negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cred, err := credentialFor(c.euid, c.egid, c.wantUID, c.wantGID, c.accel, kvm)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("credentialFor = %s, %v; want an error containing %q", credString(cred), err, c.wantErr)
				}
				return
			}
			if err != nil || credString(cred) != c.want {
				t.Fatalf("credentialFor = %s, %v; want %s", credString(cred), err, c.want)
			}
		})
	}
}

// TestKVMGroup: QEMU gets /dev/kvm's group, and only one that owns it
// for others' use, never root's.
func TestKVMGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the test makes device nodes")
	}
	dir := t.TempDir()
	// dev makes a character device (/dev/null's numbers) of mode and group.
	dev := func(name string, mode uint32, gid int) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mknod(p, syscall.S_IFCHR|mode, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, gid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	regular := filepath.Join(dir, "regular")
	os.WriteFile(regular, nil, 0o666)
	cases := []struct {
		name    string
		path    string
		gid     uint32
		need    bool
		wantErr string
	}{
		{name: "rw for everyone", path: dev("all", 0o666, 0)},
		{name: "a kvm group", path: dev("group", 0o660, 4242), gid: 4242, need: true},
		{name: "root's group", path: dev("root", 0o660, 0), wantErr: "chgrp kvm"},
		{name: "root only", path: dev("owner", 0o600, 4242), wantErr: "chgrp kvm"},
		{name: "group read-only", path: dev("ro", 0o640, 4242), wantErr: "chgrp kvm"},
		{name: "not a device", path: regular, wantErr: "not a character device"},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: "load the kvm module"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gid, need, err := kvmGroup(c.path, DefaultID)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("kvmGroup = %d, %v, %v; want an error containing %q", gid, need, err, c.wantErr)
				}
				return
			}
			if err != nil || gid != c.gid || need != c.need {
				t.Fatalf("kvmGroup = %d, %v, %v; want %d, %v", gid, need, err, c.gid, c.need)
			}
		})
	}
}

package qemu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// DefaultID is the first of the ids QEMU runs as when the engine is root:
// each machine leases one of its own from DefaultID on (ids.go).
//
// A guest that breaks QEMU's device emulation holds what QEMU holds, so
// QEMU holds nothing: it starts as this id, with no supplementary groups
// (but /dev/kvm's under KVM), and gets every file it uses as a descriptor
// the engine opened, so it owns no file and reaches none of the engine's
// by path. The id is its own: not nobody (65534), which other daemons run
// as; not a login or system user (under 60000); not in the sandboxes'
// subordinate range (sandbox.SubordinateIDBase, 0x70000000, and the 65536
// ids after it: a sandbox's root maps there, and would share the id with
// QEMU's); not in systemd's container range (524288–1879048191), its
// dynamic users (61184–65519) or its foreign range (0x7ffe0000–
// 0x7ffeffff); and under 2^31, as some tools keep ids signed. It is the
// first id after the sandboxes' range. No /etc/passwd entry is needed:
// the kernel knows ids, not names.
const DefaultID = 0x7001_0000

// kvmDevice is where QEMU opens KVM (QEMU 7.2's kvm accelerator has no
// option to take it as a descriptor: it opens /dev/kvm itself).
const kvmDevice = "/dev/kvm"

// credential is who QEMU runs as for a machine on accel: nil (the
// engine's own user) when the engine is not root, which has nothing to
// drop to; else the VMM's ids with no supplementary groups, but the group
// that owns /dev/kvm under KVM. Its errors are the callers' to prefix.
func (v *VMM) credential(accel string) (*syscall.Credential, error) {
	return credentialFor(os.Geteuid(), os.Getegid(), v.uid, v.gid, accel, kvmDevice)
}

// credentialFor is credential for an engine of euid and egid, with the
// ids asked for (0: the default) and KVM's device at kvmDev.
func credentialFor(euid, egid, wantUID, wantGID int, accel, kvmDev string) (*syscall.Credential, error) {
	if wantUID < 0 || wantGID < 0 {
		return nil, fmt.Errorf("Options.UID %d, GID %d: ids are not negative (0 is the default, %d)", wantUID, wantGID, DefaultID)
	}
	if euid != 0 {
		if (wantUID != 0 && wantUID != euid) || (wantGID != 0 && wantGID != egid) {
			return nil, fmt.Errorf("QEMU is to run as %d:%d, but the engine runs as uid %d, which cannot change user: run the engine as root, or leave Options.UID and GID unset", wantUID, wantGID, euid)
		}
		return nil, nil
	}
	uid, gid := wantUID, wantGID
	if uid == 0 {
		uid = DefaultID
	}
	if gid == 0 {
		gid = DefaultID
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if accel == "kvm" {
		g, need, err := kvmGroup(kvmDev, uid)
		if err != nil {
			return nil, err
		}
		if need {
			cred.Groups = []uint32{g}
		}
	}
	return cred, nil
}

// kvmGroup returns the group through which uid can open dev read-write,
// and whether it needs one at all (not when dev is rw for everyone). It
// refuses group 0: root's group owns more than KVM.
func kvmGroup(dev string, uid int) (gid uint32, need bool, err error) {
	st, err := os.Stat(dev)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, fmt.Errorf("%s does not exist: load the kvm module, or use accelerator tcg", dev)
		}
		return 0, false, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || st.Mode()&fs.ModeCharDevice == 0 {
		return 0, false, fmt.Errorf("%s is not a character device", dev)
	}
	perm := st.Mode().Perm()
	switch {
	case perm&0o006 == 0o006:
		return 0, false, nil
	case int(sys.Uid) == uid && perm&0o600 == 0o600:
		return 0, false, nil
	case perm&0o060 == 0o060 && sys.Gid != 0:
		return sys.Gid, true, nil
	}
	return 0, false, fmt.Errorf("%s is %s, owned by %d:%d, and QEMU runs as uid %d, which reaches it only through a group of its own: give it one (chgrp kvm %s && chmod 0660 %s, as Debian's udev rule does), or use accelerator tcg",
		dev, perm, sys.Uid, sys.Gid, uid, dev, dev)
}

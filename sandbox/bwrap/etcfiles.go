package bwrap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"evals.si/sandbox"
)

// etcFiles are the files every sandbox gets bound over its /etc, as Docker
// writes them for a container: its own, writable by root inside, kept in
// the sandbox's state (never in its root's upper directory, so never in a
// snapshot).
var etcFiles = []string{"hosts", "hostname", "resolv.conf"}

// writeEtcFiles writes the sandbox's /etc files into dir. The hostname
// is the sandbox's id (12 hex digits, as Docker uses the container id's
// first 12); its only interface is loopback, so /etc/hosts maps it to
// 127.0.1.1 where Docker writes the container's address.
func (s *Sandbox) writeEtcFiles(dir string) error {
	hostResolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("reading the host's /etc/resolv.conf: %w", err)
	}
	files := map[string][]byte{
		"hostname":    []byte(s.id + "\n"),
		"hosts":       sandbox.EtcHosts(s.id),
		"resolv.conf": sandbox.ResolvConf(hostResolv),
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := s.chownHost(dir); err != nil {
		return err
	}
	for _, name := range etcFiles {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
		if err := s.chownHost(p); err != nil {
			return err
		}
	}
	return nil
}

// etcMounts are bwrap's binds of the sandbox's /etc files (src: the
// directory holding them). Without an image /etc is the host's,
// read-only: a file the host lacks has no mount point to bind over, and
// is left out (the report says so).
func (s *Sandbox) etcMounts(src string) []string {
	var a []string
	for _, name := range etcFiles {
		if s.noImage {
			if fi, err := os.Stat("/etc/" + name); err != nil || !fi.Mode().IsRegular() {
				continue
			}
		}
		a = append(a, "--bind", filepath.Join(src, name), "/etc/"+name)
	}
	return a
}

// etcMountPoints makes sure an image root has regular files at the
// mount points: the stub layer provides them where the image has none,
// but an image's symlink there (resolv.conf -> a systemd-resolved path)
// would make bwrap mount over its target, or fail when that is missing.
// Such a symlink is replaced by an empty file in the root's changes, which
// a snapshot then carries (empty: the contents are bound over it).
func (s *Sandbox) etcMountPoints() error {
	if s.noImage {
		return nil
	}
	for _, name := range etcFiles {
		p := filepath.Join(s.root.Merged, "etc", name)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().IsRegular() {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("replacing the image's /etc/%s (a %s) with a mount point: %w", name, fi.Mode().Type(), err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return fmt.Errorf("making the mount point /etc/%s: %w", name, err)
		}
		if err := s.chownHost(p); err != nil {
			return err
		}
	}
	return nil
}

// etcNote says what the sandbox's /etc files are.
func (s *Sandbox) etcNote() string {
	note := "/etc/hosts, /etc/hostname and /etc/resolv.conf are the sandbox's own, as Docker writes them (hostname " + s.id + ", also the UTS hostname, mapped to 127.0.1.1; resolv.conf: the host's without loopback nameservers, or 8.8.8.8 and 8.8.4.4); writable by root inside and never part of a snapshot"
	if s.noImage {
		var missing []string
		for _, name := range etcFiles {
			if fi, err := os.Stat("/etc/" + name); err != nil || !fi.Mode().IsRegular() {
				missing = append(missing, "/etc/"+name)
			}
		}
		if len(missing) > 0 {
			note += "; the host has no " + strings.Join(missing, ", ") + " to bind over, so the sandbox has none either"
		}
	}
	return note
}

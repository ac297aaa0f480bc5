// Package vmprobe holds the microVM rungs (firecracker, smolvm) as ladder
// vocabulary: they probe the host for their binary and a usable /dev/kvm,
// but cannot create sandboxes yet, so their probe always reports that.
package vmprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"evals.si/sandbox"
)

// ErrNotImplemented is returned by Create: the VM rungs do not run yet.
var ErrNotImplemented = errors.New("not implemented on this host yet")

// Rung is a microVM rung that is probed but not yet runnable.
type Rung struct {
	name   string
	binary string
	kvm    string
}

// Firecracker is the firecracker rung (binary "firecracker").
func Firecracker() *Rung {
	return &Rung{name: sandbox.RungFirecracker, binary: "firecracker", kvm: "/dev/kvm"}
}

// SmolVM is the smolvm rung (binary "smolvm").
func SmolVM() *Rung { return &Rung{name: sandbox.RungSmolVM, binary: "smolvm", kvm: "/dev/kvm"} }

func (r *Rung) Name() string             { return r.name }
func (r *Rung) Isolation() sandbox.Level { return sandbox.LevelVM }

// Probe checks the binary and /dev/kvm, and reports works=false in every
// case: the rung's sandboxes are not implemented yet.
func (r *Rung) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Rung: r.name, Isolation: sandbox.LevelVM}
	var found []string
	if path, err := lookPath(r.binary); err != nil {
		found = append(found, fmt.Sprintf("%s not found on PATH", r.binary))
	} else {
		found = append(found, fmt.Sprintf("%s at %s", r.binary, path))
	}
	if f, err := os.OpenFile(r.kvm, os.O_RDWR, 0); err != nil {
		found = append(found, fmt.Sprintf("%s not usable: %v", r.kvm, err))
	} else {
		f.Close()
		found = append(found, r.kvm+" opens read-write")
	}
	p.Reason = fmt.Sprintf("%s rung %s (%s)", r.name, ErrNotImplemented, strings.Join(found, "; "))
	return p
}

// Create always fails: VM sandboxes are not implemented yet.
func (r *Rung) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("creating a %s sandbox: %w", r.name, ErrNotImplemented)
}

// lookPath finds an executable on PATH (this package only probes; it never
// runs anything, so it does not import os/exec).
func lookPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH", name)
}

package qemu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Each machine's QEMU runs as an id of its own, leased from idCount ids
// from DefaultID on, so a QEMU that one guest broke shares no uid with
// another machine's QEMU: it cannot signal, ptrace or read the memory of
// the QEMUs of other trials. A lease is an flock on a file named by the
// id in idLockDir (root's, on a tmpfs), held while the QEMU runs, so
// engines on one machine never hand out the same id twice; it ends when
// the QEMU has been reaped.
const (
	idCount   = 4096
	idLockDir = "/run/evalsi/qemu-ids"
)

// idLease is one leased id.
type idLease struct {
	id int
	f  *os.File
}

func (l *idLease) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// leaseID leases a free id of [DefaultID, DefaultID+idCount) through lock
// files under dir.
func leaseID(dir string) (*idLease, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("leasing an id for QEMU: %w", err)
	}
	start := rand.IntN(idCount)
	for i := range idCount {
		id := DefaultID + (start+i)%idCount
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(id)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("leasing an id for QEMU: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &idLease{id: id, f: f}, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("leasing an id for QEMU: %w", err)
		}
	}
	return nil, fmt.Errorf("leasing an id for QEMU: all %d ids from %d are in use", idCount, DefaultID)
}

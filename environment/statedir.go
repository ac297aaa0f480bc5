package environment

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"evals.si/sandbox/overlay"
)

// Each engine process keeps its sandboxes' state (overlay roots, setup
// snapshots) in a directory of its own below the manager's state
// directory, next to a lock file it holds for as long as it runs. The
// kernel drops a flock when its process dies, SIGKILL included, so the next
// manager to open the state directory can tell what a crashed engine left
// behind (overlays still mounted in the host's mount table, sandbox roots,
// snapshots) and remove it, while the directories of engines still running
// are left alone. Claims and sweeps take the state directory's own lock,
// so a sweep never sees a process directory before its owner holds it.
const (
	procDirPrefix = "proc-"
	ownerLock     = "owner.lock"
	sweepLock     = ".lock"
)

// procDir is one process's claim on part of a state directory.
type procDir struct {
	dir  string
	lock *os.File
}

// ownerDeadOn returns the Sweeper's test of an owner label (boot id, space,
// process directory; see Manager.claim): dead when the engine ran on boot,
// this boot of this machine (a Docker daemon may be shared with other
// machines, whose engines this one cannot see), and has stopped.
func ownerDeadOn(boot string) func(owner string) bool {
	return func(owner string) bool {
		b, dir, ok := strings.Cut(owner, " ")
		if !ok || boot == "" || b != boot || !filepath.IsAbs(dir) {
			return false
		}
		gone, err := claimGone(dir)
		return gone && err == nil
	}
}

// claimGone reports whether the engine that claimed dir has stopped: nobody
// holds its lock, or the lock is gone (a live engine holds it from before
// it makes any sandbox; with the state directory locked no claim is half
// way, so a directory without one lost its owner in between).
func claimGone(dir string) (bool, error) {
	f, err := lockFile(filepath.Join(dir, ownerLock), false, false)
	switch {
	case err == nil:
		f.Close()
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return false, nil
	default:
		return false, err
	}
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// claimStateDir removes what dead engines left in stateDir and makes this
// process's own directory there.
func claimStateDir(stateDir string, logger *slog.Logger) (_ *procDir, err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating sandbox state dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(stateDir, sweepLock), true, true)
	if err != nil {
		return nil, fmt.Errorf("locking sandbox state dir %s: %w", stateDir, err)
	}
	defer unlock.Close()

	sweep(stateDir, logger)

	b := make([]byte, 4)
	rand.Read(b)
	dir := filepath.Join(stateDir, fmt.Sprintf("%s%d-%s", procDirPrefix, os.Getpid(), hex.EncodeToString(b)))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating sandbox state dir: %w", err)
	}
	lock, err := lockFile(filepath.Join(dir, ownerLock), true, false)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("locking sandbox state dir %s: %w", dir, err)
	}
	return &procDir{dir: dir, lock: lock}, nil
}

// release removes the process's directory (unmounting anything left below
// it) and gives up the claim.
func (p *procDir) release() error {
	err := overlay.RemoveTree(p.dir)
	p.lock.Close()
	if err != nil {
		return fmt.Errorf("removing sandbox state: %w", err)
	}
	return nil
}

// sweep removes the directories of engine processes that are gone. It runs
// with the state directory locked. A failure is logged, not returned: the
// leftovers cost disk and mount table entries, not correctness.
func sweep(stateDir string, logger *slog.Logger) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		logger.Warn("listing sandbox state for leftovers of stopped engines", "dir", stateDir, "err", err)
		return
	}
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(stateDir, name)
		var dead bool
		switch {
		case strings.HasPrefix(name, procDirPrefix) && e.IsDir():
			var err error
			if dead, err = claimGone(p); err != nil {
				logger.Warn("checking sandbox state of another engine", "dir", p, "err", err)
			}
		case strings.HasPrefix(name, "sb-"):
			// Builds before per-process directories named sandboxes
			// sb-PID-N[.layer-X]: gone when that process is.
			pid, _, _ := strings.Cut(strings.TrimPrefix(name, "sb-"), "-")
			n, err := strconv.Atoi(pid)
			dead = err == nil && n > 0 && !processExists(n)
		}
		if !dead {
			continue
		}
		if err := overlay.RemoveTree(p); err != nil {
			logger.Warn("removing what a stopped engine left in the sandbox state dir", "dir", p, "err", err)
			continue
		}
		logger.Info("removed sandbox state a stopped engine left behind", "dir", p)
	}
}

// lockFile opens path (creating it when create is set) and takes an
// exclusive flock on it, waiting for it when wait is set, else failing with
// EWOULDBLOCK while another process holds it. Closing the file releases it.
func lockFile(path string, create, wait bool) (*os.File, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		if err = unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

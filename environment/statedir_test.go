package environment

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
)

// TestClaimSweepsWhatStoppedEnginesLeft: a process directory nobody holds
// (its engine was killed) is removed with the overlay still mounted in it,
// and so is a sandbox directory of an older build whose process is gone;
// the directory of an engine still running, and anything else, stay.
func TestClaimSweepsWhatStoppedEnginesLeft(t *testing.T) {
	state := t.TempDir()
	logger := slog.New(slog.DiscardHandler)

	live, err := claimStateDir(state, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer live.release()
	if err := os.WriteFile(filepath.Join(live.dir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A killed engine's directory: its owner lock is there, unheld.
	dead := filepath.Join(state, procDirPrefix+"4242-deadbeef")
	merged := filepath.Join(dead, "sb-1", "merged")
	if err := os.MkdirAll(merged, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, ownerLock), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mounted := false
	if os.Geteuid() == 0 {
		if err := unix.Mount("tmpfs", merged, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mounting a tmpfs to stand for a leaked overlay: %v", err)
		}
		mounted = true
		t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(merged, "f"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	} else {
		testenv.Missing(t, "root", "mounting needs root; the unmount part of the sweep is not checked")
	}
	// A directory made but never locked (its owner died in between).
	unlocked := filepath.Join(state, procDirPrefix+"4343-cafef00d")
	if err := os.Mkdir(unlocked, 0o700); err != nil {
		t.Fatal(err)
	}
	// An older build's sandbox and snapshot, of a process that is gone and
	// of this one (alive).
	gone := deadPid(t)
	oldGone := filepath.Join(state, "sb-"+strconv.Itoa(gone)+"-3")
	oldLayer := oldGone + ".layer-0a0b"
	oldMine := filepath.Join(state, "sb-"+strconv.Itoa(os.Getpid())+"-1")
	other := filepath.Join(state, "images")
	for _, d := range []string{oldGone, oldLayer, oldMine, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	next, err := claimStateDir(state, logger)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dead, unlocked, oldGone, oldLayer} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s: still there after the sweep (%v)", filepath.Base(d), err)
		}
	}
	for _, d := range []string{filepath.Join(live.dir, "keep"), oldMine, other, next.dir} {
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("%s: removed by the sweep, but its owner is alive or it is not sandbox state: %v", d, err)
		}
	}
	if mounted {
		if ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); err != nil || len(ms) != 0 {
			t.Errorf("mounts left below the state dir: %d (%v)", len(ms), err)
		}
	}

	// Release removes the process's own directory, mounts included.
	if os.Geteuid() == 0 {
		m := filepath.Join(next.dir, "sb-2", "merged")
		if err := os.MkdirAll(m, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
	}
	if err := next.release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(next.dir); !os.IsNotExist(err) {
		t.Errorf("release left %s (%v)", next.dir, err)
	}
	if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); len(ms) != 0 {
		t.Errorf("release left %d mounts below the state dir", len(ms))
	}
}

// deadPid is a pid no process has.
func deadPid(t *testing.T) int {
	t.Helper()
	max := 1 << 22
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			max = n
		}
	}
	for pid := max - 1; pid > max-1000; pid-- {
		if !processExists(pid) {
			return pid
		}
	}
	t.Fatal("no free pid found")
	return 0
}

// TestOwnerDead: a live engine's owner label is alive until it releases its
// claim; labels of another boot (another machine sharing a Docker daemon)
// or malformed ones are never taken for dead.
func TestOwnerDead(t *testing.T) {
	const boot = "test-boot-id"
	dead := ownerDeadOn(boot)
	p, err := claimStateDir(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	owner := boot + " " + p.dir
	if dead(owner) {
		t.Fatalf("dead(%q) while its engine holds the claim", owner)
	}
	if err := p.release(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		owner string
		dead  bool
	}{
		{owner, true},
		{"another-boot " + p.dir, false},
		{boot + " relative/dir", false},
		{boot, false},
		{"", false},
	} {
		if got := dead(tc.owner); got != tc.dead {
			t.Errorf("dead(%q) = %v, want %v", tc.owner, got, tc.dead)
		}
	}
	if ownerDeadOn("")(owner) {
		t.Error("with no boot id of its own, an engine took a label for dead")
	}
}

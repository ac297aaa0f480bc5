package bwrap

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"evals.si/internal/testenv"
	"evals.si/sandbox"
)

// An engine killed while a server was starting leaves its views of the
// sandbox's sources mounted under viewsDir; the next engine's first sandbox
// removes them, and never those of an engine still alive (its lock held).
func TestViewsOfStoppedEnginesAreSwept(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "views are made only by a root engine")
	}
	newRung(t) // viewsDir exists and is a private mount
	plant := func(name string) (dir string, mnt string) {
		dir = filepath.Join(viewsDir, name)
		mnt = filepath.Join(dir, "start-1", "root")
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(t.TempDir(), mnt, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH); os.RemoveAll(dir) })
		return dir, mnt
	}
	deadDir, deadMnt := plant("proc-999999999-dead")
	liveDir, liveMnt := plant("proc-999999998-live")
	lock, err := os.OpenFile(filepath.Join(liveDir, ".lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	// A new rung (a new engine) sweeps at its first sandbox.
	r := New(Options{})
	sb, err := r.Create(t.Context(), sandbox.Config{StateDir: filepath.Join(t.TempDir(), "s"), Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	if res, err := sb.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if m, _ := mountinfo.Mounted(deadMnt); m {
		t.Errorf("the stopped engine's view %s is still mounted", deadMnt)
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("the stopped engine's views dir %s is still there (%v)", deadDir, err)
	}
	if m, _ := mountinfo.Mounted(liveMnt); !m {
		t.Errorf("the live engine's view %s was unmounted", liveMnt)
	}
}

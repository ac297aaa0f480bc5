package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"evals.si/sandbox"
)

// TestFileOperationsCannotHang: the host rung's file operations are the
// host's (the report says a symlink reaches host files), but a FIFO at a
// path is refused without blocking, reads are capped, and a written file
// is the engine's user's, which is the host rung's "root".
func TestFileOperationsCannotHang(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, not blocks the run
	defer cancel()
	sb, err := New().Create(ctx, sandbox.Config{Workdir: "/workspace", StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	if notes := strings.Join(sb.Report().Notes, "\n"); !strings.Contains(notes, "symlinks reach any host file") {
		t.Errorf("report does not say file operations are the host's:\n%s", notes)
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "mkfifo fifo && : > big && truncate -s 65M big && pwd"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("setup: %v %+v", err, res)
	}
	for _, op := range []func() error{
		func() error { _, err := sb.ReadFile(ctx, "fifo"); return err },
		func() error { return sb.WriteFile(ctx, "fifo", []byte("x"), 0o644) },
	} {
		if err := op(); err == nil || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("file operation on a FIFO = %v, want a refusal naming the FIFO", err)
		}
	}
	if _, err := sb.ReadFile(ctx, "big"); err == nil || !strings.Contains(err.Error(), "read cap") || !strings.Contains(err.Error(), "big") {
		t.Errorf("ReadFile(big) = %v, want the read cap named with the path", err)
	}
	if err := sb.WriteFile(ctx, "d/w.txt", []byte("v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	wd := strings.TrimSpace(string(res.Stdout))
	fi, err := os.Stat(filepath.Join(wd, "d/w.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || fi.Mode().Perm() != 0o600 {
		t.Errorf("written file uid %d mode %v, want %d and 0600", st.Uid, fi.Mode().Perm(), os.Geteuid())
	}
	if ctx.Err() != nil {
		t.Fatal("file operations hung")
	}
}

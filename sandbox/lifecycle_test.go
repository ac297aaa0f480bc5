package sandbox

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLifecycle(t *testing.T) {
	l := NewLifecycle("bwrap")
	if err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	// Close waits for the running command.
	closed := make(chan error, 1)
	calls := 0
	go func() { closed <- l.Close(func() error { calls++; return errors.New("cleanup failed") }) }()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed when Close started")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a command was running")
	default:
	}
	l.End()
	if err := <-closed; err == nil || err.Error() != "cleanup failed" {
		t.Fatalf("Close = %v, want the cleanup's error", err)
	}
	if err := l.Close(func() error { calls++; return nil }); err == nil || calls != 1 {
		t.Errorf("second Close = %v after %d cleanups; want the first error, cleanup once", err, calls)
	}
	if err := l.Begin(); err == nil || !strings.Contains(err.Error(), "bwrap sandbox is closed") {
		t.Errorf("Begin after Close = %v", err)
	}
	if _, err := l.Snapshot("/x/state"); err == nil {
		t.Error("Snapshot after Close succeeded")
	}
}

func TestLifecycleSnapshot(t *testing.T) {
	l := NewLifecycle("host")
	state := filepath.Join(t.TempDir(), "state")
	dest, err := l.Snapshot(state)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dest) != filepath.Dir(state) || !strings.HasPrefix(filepath.Base(dest), "state.layer-") {
		t.Errorf("layer path %q is not a state.layer-* sibling of %q", dest, state)
	}
	if err := l.Usable(); err == nil || !strings.Contains(err.Error(), "snapshotted") {
		t.Errorf("Usable after Snapshot = %v", err)
	}
	if _, err := l.Snapshot(state); err == nil {
		t.Error("a second Snapshot succeeded")
	}
	if err := l.Close(func() error { return nil }); err != nil {
		t.Errorf("Close after Snapshot = %v", err)
	}
}

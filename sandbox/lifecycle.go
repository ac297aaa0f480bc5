package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
)

// Lifecycle is the one-way life of a sandbox whose commands run on the
// engine's side (bwrap, host): usable, then snapshotted or closed. Begin and
// End bracket each command; Snapshot and Close wait for the running ones.
// A rung embeds one, made by NewLifecycle.
type Lifecycle struct {
	rung      string
	mu        sync.Mutex
	closed    bool
	snapped   bool
	running   sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// NewLifecycle returns the lifecycle of a new sandbox of the named rung.
func NewLifecycle(rung string) *Lifecycle {
	return &Lifecycle{rung: rung, done: make(chan struct{})}
}

// Begin admits a command; the caller calls End when it is over.
func (l *Lifecycle) Begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usableLocked(); err != nil {
		return err
	}
	l.running.Add(1)
	return nil
}

// End marks a command admitted by Begin as over.
func (l *Lifecycle) End() { l.running.Done() }

// Usable reports whether the sandbox still takes work.
func (l *Lifecycle) Usable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usableLocked()
}

func (l *Lifecycle) usableLocked() error {
	switch {
	case l.closed:
		return fmt.Errorf("%s sandbox is closed", l.rung)
	case l.snapped:
		return fmt.Errorf("%s sandbox was snapshotted; create a new sandbox from its layer", l.rung)
	}
	return nil
}

// Done is closed when Close starts, for commands to stop early.
func (l *Lifecycle) Done() <-chan struct{} { return l.done }

// Snapshot marks the sandbox snapshotted, waits for running commands and
// returns a fresh layer directory path next to stateDir for the caller to
// move the sandbox's changes to. Only Close is accepted afterwards.
func (l *Lifecycle) Snapshot(stateDir string) (string, error) {
	l.mu.Lock()
	if l.closed || l.snapped {
		l.mu.Unlock()
		return "", fmt.Errorf("snapshot: %s sandbox is closed or already snapshotted", l.rung)
	}
	l.snapped = true
	l.mu.Unlock()
	l.running.Wait()
	b := make([]byte, 6)
	rand.Read(b)
	return filepath.Join(filepath.Dir(stateDir), filepath.Base(stateDir)+".layer-"+hex.EncodeToString(b)), nil
}

// Close marks the sandbox closed, waits for running commands and runs
// cleanup once; later calls return the first call's error.
func (l *Lifecycle) Close(cleanup func() error) error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.done)
		l.mu.Unlock()
		l.running.Wait()
		l.closeErr = cleanup()
	})
	return l.closeErr
}

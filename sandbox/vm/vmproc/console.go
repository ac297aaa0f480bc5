package vmproc

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// What a Console keeps of a guest's console: its first HeadSize bytes (the
// boot: which kernel, which devices, the first error) and its last
// TailSize (what happened just before the end), with a line between them
// saying how much was dropped. A console log is then at most
// HeadSize+TailSize bytes and a marker line, whatever the guest writes.
const (
	HeadSize = 64 << 10
	TailSize = 64 << 10
)

// flushInterval is the least time between two writes of the log file: a
// guest flooding its console costs the disk at most one rewrite of the
// tail (64 KiB) per interval, and a reader of the file (an error message
// quoting it) sees output at most this old.
const flushInterval = 100 * time.Millisecond

// closeWait bounds Close's wait for the last write of the file, so that a
// stalled disk delays a machine's end by at most this.
const closeWait = 2 * time.Second

// logFile is where a Console's log goes: an *os.File, written at offsets
// (the head once, the tail section rewritten in place).
type logFile interface {
	io.WriterAt
	Truncate(size int64) error
	Close() error
}

// Console is a guest's serial console as the host keeps it: an io.Writer
// (the VMM's output stream is copied into it) that never blocks on the
// disk and keeps, in memory and in a file written as it goes, the first
// HeadSize and the last TailSize bytes.
//
// Write only copies into memory; a goroutine of its own writes the file,
// at most every flushInterval. A slow or full disk therefore never slows
// the VMM (whose serial device would stall the guest): bytes the file
// has not caught up with are dropped from the middle like any others, and
// Tail, which errors quote, comes from memory and does not need the disk
// at all.
type Console struct {
	path string
	log  *slog.Logger
	f    logFile

	mu sync.Mutex
	// head is the first HeadSize bytes; its backing array never moves,
	// and bytes in it never change once written.
	head []byte
	// tail holds the bytes after the head; its last TailSize are kept
	// (it grows to 2*TailSize, then its last TailSize are moved down).
	tail []byte
	// tailTotal counts every byte written after the head.
	tailTotal int64
	// What the file holds: head[:headDone], and the tail section as of
	// tailTotal == tailDone. rewrite: a write failed, so the next flush
	// writes everything again.
	headDone int
	tailDone int64
	rewrite  bool
	fileEnd  int64
	// err is why the file lacks something, nil when the last flush
	// wrote it whole; warned: the first failure was logged.
	err    error
	warned bool

	kick      chan struct{}
	closing   chan struct{}
	flushed   chan struct{}
	closeOnce sync.Once
}

// OpenConsole creates (or truncates: a console log is one machine's) the
// log file at path. log gets a warning when the file cannot be written;
// nil discards it.
func OpenConsole(path string, log *slog.Logger) (*Console, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	return newConsole(path, f, log), nil
}

func newConsole(path string, f logFile, log *slog.Logger) *Console {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Console{
		path: path, log: log, f: f,
		head: make([]byte, 0, HeadSize),
		kick: make(chan struct{}, 1), closing: make(chan struct{}), flushed: make(chan struct{}),
	}
	go c.run()
	return c
}

// Path is the log file's path.
func (c *Console) Path() string { return c.path }

// Write keeps p's bytes as the console's next ones. It never fails and
// never waits for the disk.
func (c *Console) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	if room := HeadSize - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		if c.tail == nil {
			c.tail = make([]byte, 0, 2*TailSize)
		}
		c.tailTotal += int64(len(p))
		switch {
		case len(p) >= TailSize:
			c.tail = append(c.tail[:0], p[len(p)-TailSize:]...)
		default:
			if len(c.tail)+len(p) > cap(c.tail) {
				c.tail = c.tail[:copy(c.tail, c.tail[len(c.tail)-TailSize:])]
			}
			c.tail = append(c.tail, p...)
		}
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return n, nil
}

// Dropped is how many bytes of the console the log does not keep.
func (c *Console) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.tailTotal-TailSize, 0)
}

// Tail is the log's last n bytes (fewer when it is shorter), from memory.
func (c *Console) Tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := c.keptTail()
	if len(tail) >= n {
		return string(tail[len(tail)-n:])
	}
	var b []byte
	b = append(b, c.head...)
	if d := c.tailTotal - TailSize; d > 0 {
		b = append(b, marker(d)...)
	}
	b = append(b, tail...)
	return string(b[max(len(b)-n, 0):])
}

// keptTail is the part of tail the log keeps. c.mu is held.
func (c *Console) keptTail() []byte {
	if len(c.tail) > TailSize {
		return c.tail[len(c.tail)-TailSize:]
	}
	return c.tail
}

// marker is the line that stands for the dropped bytes.
func marker(dropped int64) []byte {
	return fmt.Appendf(nil, "\n[evalsi: %d bytes of console output dropped here: console.log keeps the first %d KiB and the last %d KiB]\n",
		dropped, HeadSize>>10, TailSize>>10)
}

// Close writes what the file lacks and closes it, waiting for that at
// most closeWait. It returns an error when the file was left without
// some of what the log keeps. Bytes written afterwards are kept in memory
// (Tail) only.
func (c *Console) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	select {
	case <-c.flushed:
	case <-time.After(closeWait):
		return fmt.Errorf("console log %s: its last write has not finished after %s (is the disk stalled?): the file may lack the console's end", c.path, closeWait)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// run writes the file whenever Write has added bytes, at most every
// flushInterval, and once more at Close.
func (c *Console) run() {
	defer close(c.flushed)
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-c.kick:
		case <-c.closing:
			c.finish()
			return
		}
		c.flush()
		timer.Reset(flushInterval)
		select {
		case <-timer.C:
		case <-c.closing:
			c.finish()
			return
		}
	}
}

func (c *Console) finish() {
	c.flush()
	if err := c.f.Close(); err != nil {
		c.fail(err)
	}
}

// flush writes what the file lacks: the head's new bytes, and the tail
// section, appended to while nothing has been dropped, rewritten (marker
// and kept tail) once something has.
func (c *Console) flush() {
	c.mu.Lock()
	headFrom := c.headDone
	if c.rewrite {
		headFrom = 0
	}
	// Outside the lock: these head bytes never change.
	head := c.head[headFrom:]
	var sec []byte
	secOff := int64(HeadSize)
	dropped := c.tailTotal - TailSize
	switch {
	case c.tailTotal == 0:
	case dropped <= 0:
		from := c.tailDone
		if c.rewrite {
			from = 0
		}
		sec = append(sec, c.tail[from:]...)
		secOff += from
	case c.tailTotal != c.tailDone || c.rewrite:
		sec = append(marker(dropped), c.keptTail()...)
	}
	c.headDone, c.tailDone, c.rewrite = len(c.head), c.tailTotal, false
	fileEnd := c.fileEnd
	c.mu.Unlock()
	if len(head) == 0 && len(sec) == 0 {
		return
	}

	var err error
	if len(head) > 0 {
		_, err = c.f.WriteAt(head, int64(headFrom))
	}
	if err == nil && len(sec) > 0 {
		end := secOff + int64(len(sec))
		_, err = c.f.WriteAt(sec, secOff)
		// The section only grows (the marker's count does), so this is
		// for a file that an earlier, failed flush left longer.
		if err == nil && end < fileEnd {
			err = c.f.Truncate(end)
		}
		if err == nil {
			c.mu.Lock()
			c.fileEnd = end
			c.mu.Unlock()
		}
	}
	if err != nil {
		c.fail(err)
		return
	}
	c.mu.Lock()
	if !c.rewrite {
		c.err = nil
	}
	c.mu.Unlock()
}

// fail records a write error: the next flush writes everything again.
func (c *Console) fail(err error) {
	c.mu.Lock()
	c.err = fmt.Errorf("console log %s: %w", c.path, err)
	c.rewrite = true
	first := !c.warned
	c.warned = true
	c.mu.Unlock()
	if first {
		c.log.Warn("writing the guest's console log failed; the VM runs on, its console kept in memory until a write succeeds",
			"path", c.path, "err", err)
	}
}

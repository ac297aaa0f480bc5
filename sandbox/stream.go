package sandbox

import (
	"io"
	"sync"
)

// OutputStream is one command's stdout and stderr, each kept to the output
// limit in a CappedBuffer as a rung's output path writes them, and the
// live delivery of what they keep to the request's Output hook.
//
// Writes never wait for the hook: one goroutine of the stream's own gives
// it what the buffers gained since its last call. A slow hook (a pool
// writing frames to a slow client) so never stalls the reader feeding the
// stream, which may be a pipe the command blocks on, or a frame
// demultiplexer serving the sandbox's other commands too. Because the hook
// is only ever given bytes the buffers keep, in the order they were kept,
// what it gets is a prefix of the result's streams and never past the
// limit, as ExecRequest.Output promises.
//
// The hook is called from that one goroutine only (never concurrently) and
// never after Stop returns, so a rung calls Stop before its Exec returns.
type OutputStream struct {
	out, err *CappedBuffer
	w        [2]streamWriter
	fn       OutputFunc
	// wake has room for one signal: writes coalesce while the hook runs.
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewOutputStream makes a stream keeping at most limit bytes of each
// of stdout and stderr and giving them to fn while the command runs. A
// nil fn streams nothing: the buffers alone.
func NewOutputStream(limit int, fn OutputFunc) *OutputStream {
	o := &OutputStream{out: NewCappedBuffer(limit), err: NewCappedBuffer(limit), fn: fn}
	o.w = [2]streamWriter{{o, o.out}, {o, o.err}}
	if fn != nil {
		o.wake, o.stop, o.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go o.deliver()
	}
	return o
}

// Stdout is the writer for the command's stdout. Like a CappedBuffer's, its
// writes never fail, so whatever copies into it keeps draining the pipe.
func (o *OutputStream) Stdout() io.Writer { return &o.w[0] }

// Stderr is the writer for the command's stderr.
func (o *OutputStream) Stderr() io.Writer { return &o.w[1] }

// Bytes returns what was kept of stdout and of stderr.
func (o *OutputStream) Bytes() (stdout, stderr []byte) { return o.out.Bytes(), o.err.Bytes() }

// Truncated reports whether either stream was cut at the limit.
func (o *OutputStream) Truncated() bool { return o.out.Truncated() || o.err.Truncated() }

// Stop ends delivery: it waits for a hook call in progress, after which the
// hook is never called again. What was not delivered by then is in Bytes,
// for the caller to take from the result. It is idempotent.
func (o *OutputStream) Stop() {
	if o.fn == nil {
		return
	}
	o.once.Do(func() { close(o.stop) })
	<-o.done
}

type streamWriter struct {
	o *OutputStream
	b *CappedBuffer
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n, err := w.b.Write(p)
	if w.o.wake != nil && len(p) > 0 {
		select {
		case w.o.wake <- struct{}{}:
		default: // a wake-up is pending; it will see these bytes too
		}
	}
	return n, err
}

func (o *OutputStream) deliver() {
	defer close(o.done)
	var sent [2]int
	for {
		select {
		case <-o.stop:
			return
		case <-o.wake:
		}
		for i, b := range [2]*CappedBuffer{o.out, o.err} {
			// Checked before every call, so Stop waits for one call at
			// most, not for a backlog.
			select {
			case <-o.stop:
				return
			default:
			}
			if p := b.from(sent[i]); len(p) > 0 {
				sent[i] += len(p)
				o.fn(i == 1, p)
			}
		}
	}
}

// from is what the buffer kept from offset off on. It is the buffer's own
// memory, not a copy: a CappedBuffer only appends, so these bytes never
// change, and a later append that moves the buffer copies them, leaving
// this view intact.
func (b *CappedBuffer) from(off int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf[off:len(b.buf):len(b.buf)]
}

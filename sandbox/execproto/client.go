package execproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxServerFrame bounds what the host accepts from a server in one
// frame: a file read's answer (64 MiB at most) and its framing. A guest is
// not trusted to size the host's allocations.
const maxServerFrame = 64<<20 + 1<<20

// Client is the host's end of a server it reaches over a byte stream (a
// microVM guest's control port). It demultiplexes the server's frames to
// the calls in flight; the frames of guest tunnels go to Options.Tunnel.
type Client struct {
	w    io.Writer
	opts ClientOptions

	wmu sync.Mutex

	mu    sync.Mutex
	calls map[uint32]*Call
	next  uint32

	ready   chan struct{}
	done    chan struct{}
	doneErr error
}

// ClientOptions tune a Client.
type ClientOptions struct {
	// Tunnel is given every tunnel frame (FrameDial, FrameData, FrameAck,
	// FrameHangup, FrameReset) from the reader goroutine: it must not
	// block. Nil: tunnel frames are answered with FrameReset.
	Tunnel func(kind byte, id uint32, payload []byte)
	// Ended says why the stream ended, for Err (for example the VMM's
	// exit status and console tail); nil: "the stream ended".
	Ended func(readErr error) error
}

// Call is one request in flight.
type Call struct {
	ID uint32
	// Stdout and Stderr, when set, are given the command's output from
	// the reader goroutine; they must not block.
	Stdout, Stderr func(p []byte)

	Started chan struct{}
	Exit    chan ExitMsg
	Done    chan DoneMsg
	// Result answers file operations, setups and restores.
	Result chan FileResult
}

// NewClient starts reading the server's frames from r; w carries the
// requests.
func NewClient(r io.Reader, w io.Writer, opts ClientOptions) *Client {
	c := &Client{w: w, opts: opts, calls: map[uint32]*Call{}, ready: make(chan struct{}), done: make(chan struct{})}
	go c.read(r)
	return c
}

// Ready is closed when the server has said it serves.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Done is closed when the stream has ended; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the stream ended (nil while it has not).
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.doneErr
	default:
		return nil
	}
}

// WaitReady waits for the server's FrameReady.
func (c *Client) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-c.done:
		return c.doneErr
	case <-ctx.Done():
		return fmt.Errorf("waiting for the sandbox's exec server: %w", context.Cause(ctx))
	}
}

func (c *Client) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var kind byte
		var id uint32
		var p []byte
		if kind, id, p, err = ReadFrameMax(br, maxServerFrame); err != nil {
			break
		}
		switch kind {
		case FrameReady:
			select {
			case <-c.ready:
			default:
				close(c.ready)
			}
			continue
		case FrameDial, FrameData, FrameAck, FrameHangup, FrameReset:
			if c.opts.Tunnel != nil {
				c.opts.Tunnel(kind, id, p)
			} else if kind == FrameDial {
				c.Send(FrameReset, id, nil)
			}
			continue
		}
		c.mu.Lock()
		call := c.calls[id]
		c.mu.Unlock()
		if call == nil {
			continue
		}
		switch kind {
		case FrameStdout:
			if call.Stdout != nil {
				call.Stdout(p)
			}
		case FrameStderr:
			if call.Stderr != nil {
				call.Stderr(p)
			}
		case FrameStarted:
			closeOnce(call.Started)
		case FrameExit:
			var m ExitMsg
			if err := m.Unmarshal(p); err != nil {
				m.Setup = "the exec server sent a malformed exit status"
			}
			sendOnce(call.Exit, m)
		case FrameDone:
			var m DoneMsg
			if err := m.Unmarshal(p); err != nil {
				m = DoneMsg{}
			}
			sendOnce(call.Done, m)
		case FrameFileResult:
			var m FileResult
			if err := m.Unmarshal(p); err != nil {
				m.Err = "the exec server sent a malformed result"
			}
			sendOnce(call.Result, m)
		}
	}
	why := errors.New("the sandbox's exec server ended the stream")
	if c.opts.Ended != nil {
		why = c.opts.Ended(err)
	}
	c.doneErr = why
	close(c.done)
}

func closeOnce(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// sendOnce delivers the call's one answer of a kind; a second (a server
// that misbehaves) is dropped rather than block the reader.
func sendOnce[T any](ch chan T, v T) {
	if ch == nil {
		return
	}
	select {
	case ch <- v:
	default:
	}
}

// Send writes one frame.
func (c *Client) Send(kind byte, id uint32, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.done:
		return c.doneErr
	default:
	}
	if err := WriteFrame(c.w, kind, id, payload); err != nil {
		return fmt.Errorf("talking to the sandbox's exec server: %w", err)
	}
	return nil
}

// Start sends a command; its answers arrive on the call's channels.
func (c *Client) Start(m ExecMsg, stdout, stderr func([]byte)) (*Call, error) {
	call := &Call{Stdout: stdout, Stderr: stderr, Started: make(chan struct{}), Exit: make(chan ExitMsg, 1), Done: make(chan DoneMsg, 1)}
	return call, c.start(call, FrameExec, m.Marshal())
}

// Kill asks the server to kill call's command and everything it started.
func (c *Client) Kill(call *Call) error { return c.Send(FrameKill, call.ID, nil) }

// Forget drops a call that is over (or given up on).
func (c *Client) Forget(call *Call) {
	c.mu.Lock()
	delete(c.calls, call.ID)
	c.mu.Unlock()
}

// Request sends a request answered by one FileResult (FrameFile,
// FrameSetup, FrameRestore) and waits for it; a result with Err set is
// returned as it is, for the caller to word.
func (c *Client) Request(ctx context.Context, kind byte, payload []byte) (FileResult, error) {
	call := &Call{Result: make(chan FileResult, 1)}
	if err := c.start(call, kind, payload); err != nil {
		return FileResult{}, err
	}
	defer c.Forget(call)
	select {
	case r := <-call.Result:
		return r, nil
	case <-c.done:
		return FileResult{}, c.doneErr
	case <-ctx.Done():
		return FileResult{}, context.Cause(ctx)
	}
}

func (c *Client) start(call *Call, kind byte, payload []byte) error {
	c.mu.Lock()
	c.next++
	if c.next&GuestIDBit != 0 {
		c.next = 1
	}
	call.ID = c.next
	c.calls[call.ID] = call
	c.mu.Unlock()
	if err := c.Send(kind, call.ID, payload); err != nil {
		c.Forget(call)
		return err
	}
	return nil
}

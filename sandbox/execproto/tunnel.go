package execproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// A Tunnel carries TCP connections over the exec protocol's stream (the
// guest's control port), both ends the same type: the guest Opens each
// connection a sandbox command makes to 127.0.0.1:ProxyPort; the host, on
// the guest's FrameDial, dials the egress proxy and splices.
//
// Frames arrive from the stream's reader, which serves every call of the
// session, so Frame never blocks: it queues what a connection receives,
// and each connection has a goroutine that writes its socket and one that
// reads it. What a peer may have queued is bounded by the credit window
// (TunnelWindow bytes unacknowledged per direction), so a peer that sends
// past it, or frames larger than TunnelChunk, is breaking the protocol
// and its connection is reset rather than buffered without end.

// TunnelSend writes one frame to the stream (safe for concurrent use).
type TunnelSend func(kind byte, id uint32, payload []byte) error

// TunnelDial connects a connection the peer opened (the host's: to the
// egress proxy).
type TunnelDial func(ctx context.Context) (net.Conn, error)

// Tunnel is one stream's end of the tunnelled connections.
type Tunnel struct {
	send TunnelSend
	dial TunnelDial // nil: the peer may not open connections (the guest)

	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[uint32]*tunnelConn
	next   uint32
	closed bool
	wg     sync.WaitGroup
}

// NewTunnel returns a tunnel that writes its frames with send; dial, when
// set, connects each connection the peer opens (FrameDial).
func NewTunnel(send TunnelSend, dial TunnelDial) *Tunnel {
	ctx, cancel := context.WithCancel(context.Background())
	return &Tunnel{send: send, dial: dial, ctx: ctx, cancel: cancel, conns: map[uint32]*tunnelConn{}}
}

// tunnelConn is one connection. Its socket is written by its writer
// goroutine only and read by its reader goroutine only.
type tunnelConn struct {
	t  *Tunnel
	id uint32

	mu   sync.Mutex
	wake chan struct{} // the writer has something to do (capacity 1)
	conn net.Conn      // nil while the host dials
	// in is what the peer sent, not yet written to the socket; pending
	// counts its bytes (and those being written), which the peer's window
	// bounds.
	in       [][]byte
	pending  int
	peerDone bool // the peer hung up: close our write side once in is written
	// credit is how much more the reader may send before the peer acks.
	credit    int
	creditC   chan struct{} // more credit (capacity 1)
	localDone bool          // we hung up (our socket's read side ended)
	wroteDone bool          // the write side is closed
	over      bool
	overC     chan struct{}
}

// MaxTunnelConns bounds a tunnel's open connections, on both ends: each
// costs the host a socket to the proxy, goroutines and up to a window of
// queued bytes, so a sandbox opening connections without end must not be
// able to spend the engine's descriptors and memory. Past it a new
// connection is reset at once.
const MaxTunnelConns = 128

// tunnelDialTimeout bounds the host's dial of one connection.
const tunnelDialTimeout = 30 * time.Second

var errTunnelFull = fmt.Errorf("tunnel: %d connections open already", MaxTunnelConns)

func (t *Tunnel) add(id uint32, conn net.Conn) (*tunnelConn, error) {
	c := &tunnelConn{t: t, id: id, conn: conn, wake: make(chan struct{}, 1), credit: TunnelWindow, creditC: make(chan struct{}, 1), overC: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return nil, errors.New("tunnel: closed")
	case t.conns[id] != nil:
		return nil, errors.New("tunnel: connection id in use")
	case len(t.conns) >= MaxTunnelConns:
		return nil, errTunnelFull
	}
	t.conns[id] = c
	t.wg.Add(1)
	return c, nil
}

// Open carries conn (accepted inside the guest) to the peer, which
// connects it on its side; the tunnel owns conn from then on.
func (t *Tunnel) Open(conn net.Conn) error {
	t.mu.Lock()
	var id uint32
	for range 1 << 20 {
		t.next = (t.next + 1) &^ GuestIDBit
		if t.next == 0 {
			continue
		}
		if t.conns[t.next|GuestIDBit] == nil {
			id = t.next | GuestIDBit
			break
		}
	}
	t.mu.Unlock()
	if id == 0 {
		conn.Close()
		return errors.New("tunnel: no free connection id")
	}
	c, err := t.add(id, conn)
	if err != nil {
		conn.Close()
		return err
	}
	if err := t.send(FrameDial, id, nil); err != nil {
		c.end(false)
		return fmt.Errorf("tunnel: opening connection %#x: %w", id, err)
	}
	c.start()
	return nil
}

// Frame handles one tunnel frame from the stream's reader; it never
// blocks on a socket or on the stream.
func (t *Tunnel) Frame(kind byte, id uint32, p []byte) {
	if kind == FrameDial {
		t.dialed(id)
		return
	}
	t.mu.Lock()
	c := t.conns[id]
	t.mu.Unlock()
	if c == nil {
		// Over already (a reset crossed frames in flight): nothing to
		// answer, and answering a reset with a reset could loop.
		return
	}
	switch kind {
	case FrameData:
		c.data(p)
	case FrameAck:
		var m AckMsg
		if err := m.Unmarshal(p); err != nil {
			c.abort()
			return
		}
		c.ack(m.N)
	case FrameHangup:
		c.hangup()
	case FrameReset:
		c.end(false)
	}
}

// dialed is the peer's FrameDial: connect (in the background) and splice.
func (t *Tunnel) dialed(id uint32) {
	if t.dial == nil || id&GuestIDBit == 0 {
		go t.send(FrameReset, id, nil)
		return
	}
	c, err := t.add(id, nil)
	if err != nil {
		t.mu.Lock()
		old := t.conns[id]
		t.mu.Unlock()
		if old != nil {
			// A reused id breaks the protocol: end both.
			old.abort()
		} else {
			go t.send(FrameReset, id, nil)
		}
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(t.ctx, tunnelDialTimeout)
		conn, err := t.dial(ctx)
		cancel()
		if err != nil {
			// No proxy: the guest's client sees its connection close.
			t.send(FrameHangup, id, nil)
			c.abort()
			return
		}
		c.mu.Lock()
		if c.over {
			c.mu.Unlock()
			conn.Close()
			return
		}
		c.conn = conn
		c.mu.Unlock()
		c.start()
	}()
}

func (c *tunnelConn) start() {
	go c.reader()
	go c.writer()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// data queues bytes the peer sent, within its window.
func (c *tunnelConn) data(p []byte) {
	c.mu.Lock()
	if len(p) > TunnelChunk || c.pending+len(p) > TunnelWindow || c.peerDone {
		c.mu.Unlock()
		c.abort()
		return
	}
	if len(p) > 0 {
		c.in = append(c.in, p)
		c.pending += len(p)
	}
	c.mu.Unlock()
	poke(c.wake)
}

func (c *tunnelConn) ack(n uint64) {
	c.mu.Lock()
	if n > uint64(TunnelWindow-c.credit) {
		// More acknowledged than was ever sent.
		c.mu.Unlock()
		c.abort()
		return
	}
	c.credit += int(n)
	c.mu.Unlock()
	poke(c.creditC)
}

func (c *tunnelConn) hangup() {
	c.mu.Lock()
	c.peerDone = true
	c.mu.Unlock()
	poke(c.wake)
}

// abort resets the connection on both sides.
func (c *tunnelConn) abort() {
	if c.end(false) {
		go c.t.send(FrameReset, c.id, nil)
	}
}

// end closes the connection and forgets it; false: it was over already.
// graceful: both sides hung up and everything was written.
func (c *tunnelConn) end(graceful bool) bool {
	c.mu.Lock()
	if c.over {
		c.mu.Unlock()
		return false
	}
	c.over = true
	conn := c.conn
	close(c.overC)
	c.in, c.pending = nil, 0
	c.mu.Unlock()
	if conn != nil {
		if tc, ok := conn.(*net.TCPConn); ok && !graceful {
			// An abort is a reset for the socket's peer too, not an
			// orderly end it would take for a complete response.
			tc.SetLinger(0)
		}
		conn.Close()
	}
	c.t.mu.Lock()
	if c.t.conns[c.id] == c {
		delete(c.t.conns, c.id)
	}
	c.t.mu.Unlock()
	c.t.wg.Done()
	return true
}

// finishIfDone ends the connection once both directions are over.
func (c *tunnelConn) finishIfDone() {
	c.mu.Lock()
	done := c.localDone && c.wroteDone
	c.mu.Unlock()
	if done {
		c.end(true)
	}
}

// writer writes what the peer sent to the socket and acks it, then closes
// the socket's write side when the peer has hung up.
func (c *tunnelConn) writer() {
	for {
		c.mu.Lock()
		for len(c.in) == 0 && !c.peerDone && !c.over {
			c.mu.Unlock()
			select {
			case <-c.wake:
			case <-c.overC:
			}
			c.mu.Lock()
		}
		if c.over {
			c.mu.Unlock()
			return
		}
		if len(c.in) == 0 { // peerDone, all written
			c.wroteDone = true
			conn := c.conn
			c.mu.Unlock()
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			c.finishIfDone()
			return
		}
		p := c.in[0]
		c.in = c.in[1:]
		conn := c.conn
		c.mu.Unlock()
		if _, err := conn.Write(p); err != nil {
			c.abort()
			return
		}
		c.mu.Lock()
		c.pending -= len(p)
		c.mu.Unlock()
		if err := c.t.send(FrameAck, c.id, AckMsg{N: uint64(len(p))}.Marshal()); err != nil {
			c.end(false)
			return
		}
	}
}

// reader sends what the socket gives, within the credit the peer has
// granted, then hangs up.
func (c *tunnelConn) reader() {
	buf := make([]byte, TunnelChunk)
	for {
		c.mu.Lock()
		for c.credit == 0 && !c.over {
			c.mu.Unlock()
			select {
			case <-c.creditC:
			case <-c.overC:
			}
			c.mu.Lock()
		}
		if c.over {
			c.mu.Unlock()
			return
		}
		n := min(c.credit, len(buf))
		conn := c.conn
		c.mu.Unlock()
		k, err := conn.Read(buf[:n])
		if k > 0 {
			c.mu.Lock()
			c.credit -= k
			c.mu.Unlock()
			// A copy: send may keep the slice (a pipe's writer).
			if serr := c.t.send(FrameData, c.id, append([]byte(nil), buf[:k]...)); serr != nil {
				c.end(false)
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if serr := c.t.send(FrameHangup, c.id, nil); serr != nil {
				c.end(false)
				return
			}
			c.mu.Lock()
			c.localDone = true
			c.mu.Unlock()
			c.finishIfDone()
			return
		}
		if err != nil {
			c.abort()
			return
		}
	}
}

// Close resets every connection and refuses new ones; it waits for them
// to be closed.
func (t *Tunnel) Close() {
	t.mu.Lock()
	t.closed = true
	conns := make([]*tunnelConn, 0, len(t.conns))
	for _, c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	t.cancel()
	for _, c := range conns {
		c.end(false)
	}
	t.wg.Wait()
}

// Len is how many connections are open (for tests and status).
func (t *Tunnel) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

package execproto

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stream is one direction of a control stream: frames written to an
// os.Pipe, read back by a goroutine that hands them to a handler, as the
// server's and the client's readers do.
type stream struct {
	mu sync.Mutex
	w  *os.File
}

func (s *stream) send(kind byte, id uint32, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return WriteFrame(s.w, kind, id, p)
}

// pipeStream returns the send func of a new stream whose frames go to
// handle, read in order from one goroutine.
func pipeStream(t *testing.T, handle func(kind byte, id uint32, p []byte)) TunnelSend {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(r)
		for {
			kind, id, p, err := ReadFrame(br)
			if err != nil {
				return
			}
			handle(kind, id, p)
		}
	}()
	t.Cleanup(func() { w.Close(); <-done; r.Close() })
	return (&stream{w: w}).send
}

// tunnelPair joins a guest tunnel and a host tunnel that dials with dial.
func tunnelPair(t *testing.T, dial TunnelDial) (guest, host *Tunnel) {
	t.Helper()
	var g, h *Tunnel
	ready := make(chan struct{})
	toHost := pipeStream(t, func(k byte, id uint32, p []byte) { <-ready; h.Frame(k, id, p) })
	toGuest := pipeStream(t, func(k byte, id uint32, p []byte) { <-ready; g.Frame(k, id, p) })
	g = NewTunnel(toHost, nil)
	h = NewTunnel(toGuest, dial)
	close(ready)
	t.Cleanup(func() { g.Close(); h.Close() })
	return g, h
}

// listen returns a loopback listener whose connections go to serve.
func listen(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l
}

// guestListener is the guest's side: a loopback listener whose
// connections the guest tunnel opens.
func guestListener(t *testing.T, g *Tunnel) string {
	return listen(t, func(c net.Conn) {
		if err := g.Open(c); err != nil {
			t.Errorf("Open: %v", err)
		}
	}).Addr().String()
}

func dialTo(addr string) TunnelDial {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func echo(c net.Conn) {
	defer c.Close()
	io.Copy(c, c)
	c.(*net.TCPConn).CloseWrite()
}

func TestTunnelConcurrentConnections(t *testing.T) {
	proxy := listen(t, echo)
	g, h := tunnelPair(t, dialTo(proxy.Addr().String()))
	addr := guestListener(t, g)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := bytes.Repeat([]byte(fmt.Sprintf("connection %d;", i)), 1000+i*100)
			go func() {
				c.Write(msg)
				c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- fmt.Errorf("connection %d: echoed %d bytes, want %d (same content)", i, len(got), len(msg))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitEmpty(t, g, h)
}

// waitEmpty waits for both tunnels to have forgotten every connection.
func waitEmpty(t *testing.T, ts ...*Tunnel) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, tun := range ts {
		for tun.Len() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d tunnel connections still open", tun.Len())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestTunnelLargeTransferBothWays sends 10 MB each way at once, the
// proxy side reading slowly, so the window is what keeps the sender in
// check (a sender past it would be reset).
func TestTunnelLargeTransferBothWays(t *testing.T) {
	const size = 10 << 20
	up, down := make([]byte, size), make([]byte, size)
	rand.Read(up)
	rand.Read(down)
	gotUp := make(chan [32]byte, 1)
	proxy := listen(t, func(c net.Conn) {
		defer c.Close()
		go func() {
			c.Write(down)
			c.(*net.TCPConn).CloseWrite()
		}()
		hsh := sha256.New()
		buf := make([]byte, 7000)
		for {
			n, err := c.Read(buf)
			hsh.Write(buf[:n])
			if err != nil {
				break
			}
			time.Sleep(50 * time.Microsecond) // a slow consumer
		}
		gotUp <- [32]byte(hsh.Sum(nil))
	})
	g, h := tunnelPair(t, dialTo(proxy.Addr().String()))
	c, err := net.Dial("tcp", guestListener(t, g))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		c.Write(up)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the download: %v", err)
	}
	if len(got) != size || sha256.Sum256(got) != sha256.Sum256(down) {
		t.Errorf("download: %d bytes, want %d, same content: %v", len(got), size, bytes.Equal(got, down))
	}
	select {
	case sum := <-gotUp:
		if sum != sha256.Sum256(up) {
			t.Error("upload arrived altered or incomplete")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("upload never completed")
	}
	waitEmpty(t, g, h)
}

// TestTunnelHalfClose: the client ends its request, the server answers
// after reading to EOF, as an HTTP/1.0 exchange through the proxy does.
func TestTunnelHalfClose(t *testing.T) {
	proxy := listen(t, func(c net.Conn) {
		defer c.Close()
		req, _ := io.ReadAll(c)
		fmt.Fprintf(c, "got %q", req)
	})
	g, h := tunnelPair(t, dialTo(proxy.Addr().String()))
	c, err := net.Dial("tcp", guestListener(t, g))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("request"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer after a half close: %v", err)
	}
	if string(got) != `got "request"` {
		t.Errorf("answer %q", got)
	}
	waitEmpty(t, g, h)
}

func TestTunnelDialFailure(t *testing.T) {
	g, h := tunnelPair(t, func(ctx context.Context) (net.Conn, error) {
		return nil, errors.New("no proxy")
	})
	c, err := net.Dial("tcp", guestListener(t, g))
	if errors.Is(err, syscall.ECONNRESET) {
		// Reset before the dial returned: closed, as it should be.
		waitEmpty(t, g, h)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 10))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read after a failed dial: %d bytes, %v; want the connection closed", n, err)
	}
	waitEmpty(t, g, h)
}

// TestTunnelProtocolViolations: a peer that sends past its window, a
// frame past TunnelChunk, data after its hangup or a host id is reset;
// the connection it dialed is closed.
func TestTunnelProtocolViolations(t *testing.T) {
	chunk := make([]byte, TunnelChunk)
	tests := []struct {
		name   string
		frames func(id uint32) [][2]any // kind, payload
	}{
		{"past the window", func(id uint32) [][2]any {
			var fs [][2]any
			for range TunnelWindow/TunnelChunk + 1 {
				fs = append(fs, [2]any{byte(FrameData), chunk})
			}
			return fs
		}},
		{"frame past the chunk size", func(id uint32) [][2]any {
			return [][2]any{{byte(FrameData), make([]byte, TunnelChunk+1)}}
		}},
		{"data after hangup", func(id uint32) [][2]any {
			return [][2]any{{byte(FrameHangup), []byte(nil)}, {byte(FrameData), []byte("x")}}
		}},
		{"ack of more than was sent", func(id uint32) [][2]any {
			return [][2]any{{byte(FrameAck), AckMsg{N: 1}.Marshal()}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The proxy's connection is held by a dial that waits, so
			// nothing the peer sends is written and acked meanwhile.
			release := make(chan struct{})
			accepted := make(chan net.Conn, 1)
			proxy := listen(t, func(c net.Conn) { accepted <- c })
			resets := make(chan uint32, 4)
			toPeer := pipeStream(t, func(k byte, id uint32, p []byte) {
				if k == FrameReset {
					resets <- id
				}
			})
			h := NewTunnel(toPeer, func(ctx context.Context) (net.Conn, error) {
				<-release
				return net.Dial("tcp", proxy.Addr().String())
			})
			defer h.Close()
			id := uint32(GuestIDBit | 7)
			h.Frame(FrameDial, id, nil)
			for _, f := range tt.frames(id) {
				h.Frame(f[0].(byte), id, f[1].([]byte))
			}
			select {
			case got := <-resets:
				if got != id {
					t.Errorf("reset of %#x, want %#x", got, id)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no FrameReset for a peer breaking the protocol")
			}
			close(release)
			waitEmpty(t, h)
			select {
			case c := <-accepted:
				// Dialed after the reset: closed at once.
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					t.Error("the proxy connection of a reset tunnel connection stayed open")
				}
				c.Close()
			case <-time.After(5 * time.Second):
			}
		})
	}
	t.Run("host id", func(t *testing.T) {
		resets := make(chan uint32, 1)
		h := NewTunnel(pipeStream(t, func(k byte, id uint32, p []byte) {
			if k == FrameReset {
				resets <- id
			}
		}), dialTo("127.0.0.1:1"))
		defer h.Close()
		h.Frame(FrameDial, 5, nil)
		select {
		case got := <-resets:
			if got != 5 {
				t.Errorf("reset of %#x, want 5", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a dial with a host id was not reset")
		}
	})
}

// TestTunnelCloseEndsConnections: closing a tunnel (the session ended)
// closes its connections on the guest's side.
func TestTunnelCloseEndsConnections(t *testing.T) {
	proxy := listen(t, echo)
	g, _ := tunnelPair(t, dialTo(proxy.Addr().String()))
	c, err := net.Dial("tcp", guestListener(t, g))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("echo before Close: %v", err)
	}
	g.Close()
	if _, err := c.Read(buf); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read after the tunnel closed: %v, want the connection ended", err)
	}
	if g.Len() != 0 {
		t.Errorf("%d connections after Close", g.Len())
	}
}

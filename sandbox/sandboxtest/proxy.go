package sandboxtest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Proxy is a minimal egress proxy for tests: HTTP CONNECT and plain HTTP to
// the allowed host:port names (each mapped to a loopback address to dial),
// 403 with X-Proxy-Error: blocked-by-allowlist otherwise. It listens both on
// 127.0.0.1 and on a unix socket.
type Proxy struct {
	// TCPAddr is "127.0.0.1:port"; UnixAddr is "unix:/path".
	TCPAddr, UnixAddr string

	allow map[string]string
	mu    sync.Mutex
	log   []string
}

// StartProxy starts a Proxy that lets through the hosts in allow
// ("name:port" → "127.0.0.1:port" to dial); it stops when t ends.
func StartProxy(t testing.TB, allow map[string]string) *Proxy {
	t.Helper()
	p := &Proxy{allow: allow}
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close(); ul.Close() })
	p.TCPAddr, p.UnixAddr = tl.Addr().String(), "unix:"+sock
	go p.serve(tl)
	go p.serve(ul)
	return p
}

// Log lists "allowed HOST:PORT" and "refused HOST:PORT", in order.
func (p *Proxy) Log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

func (p *Proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	target := req.Host
	if req.Method != http.MethodConnect && !strings.Contains(target, ":") {
		target += ":80"
	}
	dial, ok := p.allow[target]
	p.mu.Lock()
	if ok {
		p.log = append(p.log, "allowed "+target)
	} else {
		p.log = append(p.log, "refused "+target)
	}
	p.mu.Unlock()
	if !ok {
		fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: blocked-by-allowlist\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", dial)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if req.Method == http.MethodConnect {
		fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	} else {
		req.RequestURI = ""
		req.Header.Set("Connection", "close")
		req.Write(up)
	}
	go io.Copy(up, br)
	io.Copy(c, up)
}

// ConnectScript is a shell command that opens a CONNECT tunnel to the
// host:port given as its last argument through $HTTPS_PROXY, sends a GET and
// prints the body; it exits 3 (printing "status N") when the proxy refuses.
const ConnectScript = `python3 -c "
import os, socket, sys
host = sys.argv[1]
proxy = os.environ['HTTPS_PROXY'].split('//')[1].rstrip('/').rsplit(':', 1)
s = socket.create_connection((proxy[0], int(proxy[1])), 10)
s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (host, host)).encode())
status = s.recv(1024).decode().split()[1]
if status != '200':
    print('status', status); sys.exit(3)
s.sendall(b'GET / HTTP/1.0\r\nHost: x\r\n\r\n')
data = b''
while True:
    b = s.recv(4096)
    if not b: break
    data += b
print(data.decode().split('\r\n\r\n', 1)[1])" `

// Package bridge carries the egress proxy into sandboxes that have no route
// out of their network namespace. On the host, Relay makes the proxy
// reachable as a unix socket any uid can connect to, which a rung binds into
// the sandbox; inside, the engine binary re-executed as the
// forwarder helper listens on Listen (127.0.0.1:3128) and relays each
// connection to that socket, so HTTP(S)_PROXY=http://127.0.0.1:3128 works
// in a network namespace with only loopback.
//
// Importing the package registers the forwarder helper, so programs (and
// tests) that use it call reexec.Init first thing in main.
package bridge

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"evals.si/sandbox"
	"evals.si/sandbox/reexec"
)

// HelperForward is the re-exec helper that listens inside the sandbox and
// forwards each connection to the egress proxy's unix socket. Its arguments
// are SOCK LISTEN; it writes one byte to fd 3 and closes it once listening,
// so fd 3 must be open (a pipe to wait on, or /dev/null).
const HelperForward = "evalsi-bwrap-forward"

// Listen is where the forwarder listens inside a sandbox.
const Listen = "127.0.0.1:3128"

func init() {
	reexec.Register(HelperForward, forwardMain)
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "evalsi %s: %v\n", HelperForward, err)
	return 125
}

// forwardMain: SOCK LISTEN; fd 3 is written to and closed once listening.
func forwardMain(args []string) int {
	if len(args) != 2 {
		return fail(errors.New("usage: SOCK LISTEN"))
	}
	ln, err := net.Listen("tcp", args[1])
	if err != nil {
		return fail(err)
	}
	ready := os.NewFile(3, "ready")
	ready.Write([]byte{1})
	ready.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			return fail(err)
		}
		go func() {
			up, err := net.Dial("unix", args[0])
			if err != nil {
				fmt.Fprintf(os.Stderr, "evalsi proxy forwarder: %v\n", err)
				c.Close()
				return
			}
			Splice(c, up)
		}()
	}
}

// Splice copies both ways until either side ends, then closes both.
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}

// Relay listens on the unix socket sock, connectable by any uid (a sandbox
// may run as another user than the proxy's socket admits), and relays each
// connection to the egress proxy at addr ("unix:/path" or "host:port")
// until the returned listener is closed.
func Relay(addr, sock string) (net.Listener, error) {
	network, target := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, target = "unix", p
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("egress proxy socket %s: %w", p, err)
		}
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("egress proxy socket %s is not a unix socket", p)
		}
	} else if addr == "" {
		return nil, errors.New("network allowlist needs an egress proxy (policy proxy_addr is empty)")
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("egress proxy address %q: want unix:/path or host:port: %w", addr, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("bridging to egress proxy %s: %w", addr, err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("bridging to egress proxy %s: %w", addr, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				up, err := net.DialTimeout(network, target, 10*time.Second)
				if err != nil {
					slog.Warn("sandbox cannot reach the egress proxy", "proxy", addr, "err", err)
					c.Close()
					return
				}
				Splice(c, up)
			}()
		}
	}()
	return ln, nil
}

// ProxyEnv is the environment that sends a sandbox's HTTP clients to the
// forwarder.
func ProxyEnv(allowHosts []string) map[string]string {
	env := map[string]string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		env[k] = "http://" + Listen
	}
	np := sandbox.NoProxy(allowHosts)
	env["NO_PROXY"], env["no_proxy"] = np, np
	return env
}
